"""The alert outbox's MCP server as an agent sees it, through the official MCP Python SDK.

Driven by tests/it/mcp.rs, which starts the server, runs one scenario of this script with
the venv's python, then checks the database itself. Each scenario asserts what an agent
relies on and ends by printing one JSON object (ids it made) on standard output.

    mcp_client.py flow URL TOKEN OTHER_TOKEN   approve, repeat, conflict, revise, read, isolation
    mcp_client.py hostile URL TOKEN            oversized and deep arguments, unknown tools
    mcp_client.py stdio OUTBOXCTL TOKEN_FILE DATABASE_URL   the same server over stdio
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

TOOLS = {"approve_alert", "revise_alert", "get_alert", "list_destinations", "list_alerts"}

IDENTITY = {
    "destination": "ops",
    "subject": "contract:MCP-1",
    "occurrence": "2027-03-31/30d",
}
PAYLOAD = {"vendor": "Acme Tools", "amount": "12000.00", "currency": "EUR", "days_remaining": 30}
CORRECTED = {**PAYLOAD, "amount": "12500.00"}


def over_http(url: str, token: str, mode: str = "auto") -> Client:
    """A client whose every request carries `token`; no response cache, so every answer
    comes from the server. `auto` speaks the newest protocol the server offers, `legacy`
    the initialize handshake of the clients deployed before 2026-07-28."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(url, http_client=http), cache=None, mode=mode)


def text_of(result) -> str:
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def ok(result, what: str) -> dict:
    assert not result.is_error, f"{what}: unexpected tool error: {text_of(result)}"
    assert isinstance(result.structured_content, dict), f"{what}: no structured content"
    return result.structured_content


def refused(result, kind: str, what: str) -> str:
    """The text of a tool error of problem type `kind`."""
    assert result.is_error, f"{what}: expected a tool error, got {result.structured_content}"
    problem = result.structured_content or {}
    assert problem.get("type") == f"/problems/{kind}", f"{what}: {problem}"
    text = text_of(result)
    assert text and text == problem.get("detail"), f"{what}: text {text!r} vs {problem}"
    return text


async def protocol_error(call, what: str) -> MCPError:
    try:
        await call
    except MCPError as err:
        return err
    raise AssertionError(f"{what}: expected a protocol error")


async def flow(url: str, token: str, other_token: str) -> dict:
    async with over_http(url, token) as agent:
        instructions = agent.instructions or ""
        assert "revise_alert" in instructions and "occurrence" in instructions, instructions

        tools = (await agent.list_tools()).tools
        assert {tool.name for tool in tools} == TOOLS, [tool.name for tool in tools]
        approve = next(tool for tool in tools if tool.name == "approve_alert")
        assert set(approve.input_schema["required"]) == {"destination", "subject", "occurrence", "payload"}
        assert "never from the run's clock" in (approve.description or "")

        destinations = ok(await agent.call_tool("list_destinations", {}), "list_destinations")
        assert [d["name"] for d in destinations["destinations"]] == ["ops"], destinations

        first = ok(await agent.call_tool("approve_alert", {**IDENTITY, "payload": PAYLOAD}), "approve")
        assert first["created"] is True and first["state"] == "pending", first
        alert_id = first["alert_id"]
        assert first["alert"]["id"] == alert_id

        # A rerun, or a retry after a lost answer: the same alert, nothing written.
        again = ok(await agent.call_tool("approve_alert", {**IDENTITY, "payload": PAYLOAD}), "approve again")
        assert again["created"] is False and again["alert_id"] == alert_id, again

        conflict = await agent.call_tool("approve_alert", {**IDENTITY, "payload": CORRECTED})
        text = refused(conflict, "identity-conflict", "changed payload")
        assert "revise_alert" in text and alert_id in text, text
        assert conflict.structured_content["latest_alert_id"] == alert_id

        revised = ok(
            await agent.call_tool(
                "revise_alert",
                {"alert_id": alert_id, "payload": CORRECTED, "reason": "the quote was revised to 12,500 EUR"},
            ),
            "revise",
        )
        assert revised["created"] is True and revised["alert_id"] != alert_id, revised
        revision_id = revised["alert_id"]
        assert revised["alert"]["revision"] == 1, revised["alert"]

        trail = ok(await agent.call_tool("get_alert", {"alert_id": alert_id}), "get_alert")
        assert trail["id"] == alert_id and trail["evidence"], trail
        assert [r["id"] for r in trail["revisions"]] == [alert_id, revision_id], trail["revisions"]

        resource = await agent.read_resource(f"outbox://alerts/{revision_id}")
        cited = json.loads(resource.contents[0].text)
        assert cited["id"] == revision_id and cited["reason"].startswith("the quote"), cited
        assert cited["evidence"], cited
        listed = await agent.read_resource("outbox://destinations")
        assert json.loads(listed.contents[0].text)["destinations"][0]["name"] == "ops"
        templates = (await agent.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["outbox://alerts/{id}"], templates

        page = ok(await agent.call_tool("list_alerts", {"subject": "MCP-1", "limit": 10}), "list_alerts")
        assert {a["id"] for a in page["alerts"]} == {alert_id, revision_id}, page
        bad_filter = await agent.call_tool("list_alerts", {"state": "lost"})
        assert "`state`" in refused(bad_filter, "invalid-query", "bad filter")

    # A client of the handshake era is served the same way, one request at a time.
    async with over_http(url, token, mode="legacy") as older:
        assert older.protocol_version != "2026-07-28", older.protocol_version
        assert {tool.name for tool in (await older.list_tools()).tools} == TOOLS
        rerun = ok(await older.call_tool("approve_alert", {**IDENTITY, "payload": CORRECTED}), "legacy rerun")
        assert rerun["created"] is False and rerun["alert_id"] == revision_id, rerun
        read = ok(await older.call_tool("get_alert", {"alert_id": alert_id}), "legacy get_alert")
        assert read["state"] in ("pending", "superseded"), read

    async with over_http(url, other_token) as stranger:
        agent_version = stranger.protocol_version
        unseen = await stranger.call_tool("get_alert", {"alert_id": alert_id})
        assert alert_id in refused(unseen, "alert-not-found", "another tenant's get_alert")
        nothing = ok(await stranger.call_tool("list_alerts", {}), "another tenant's list_alerts")
        assert nothing["alerts"] == [], nothing
        not_theirs = await stranger.call_tool(
            "revise_alert", {"alert_id": alert_id, "payload": {"a": 1}, "reason": "taking over"}
        )
        refused(not_theirs, "alert-not-found", "another tenant's revise_alert")
        err = await protocol_error(stranger.read_resource(f"outbox://alerts/{alert_id}"), "resource")
        # Resource not found: -32602 since protocol 2026-07-28 (-32002 before).
        assert agent_version == "2026-07-28", agent_version
        assert err.code == -32602 and alert_id in err.message, (err.code, err.message)

    return {"alert_id": alert_id, "revision_id": revision_id}


async def hostile(url: str, token: str) -> dict:
    async with over_http(url, token) as agent:
        identity = {**IDENTITY, "subject": "contract:HOSTILE"}

        oversized = {"blob": "x" * (256 * 1024 + 100)}
        text = refused(
            await agent.call_tool("approve_alert", {**identity, "payload": oversized}),
            "payload-too-large",
            "oversized payload",
        )
        assert "262144 bytes" in text, text

        deep: object = 1
        for _ in range(100):
            deep = [deep]
        text = refused(
            await agent.call_tool("approve_alert", {**identity, "payload": {"deep": deep}}),
            "invalid-payload",
            "deep payload",
        )
        assert "64 levels" in text, text

        unknown_field = await agent.call_tool("approve_alert", {**identity, "payload": PAYLOAD, "priority": 1})
        assert "priority" in refused(unknown_field, "invalid-field", "unknown argument")
        missing = await agent.call_tool("approve_alert", {"destination": "ops", "payload": PAYLOAD})
        assert "subject" in refused(missing, "missing-field", "missing argument")
        nowhere = await agent.call_tool("approve_alert", {**identity, "destination": "nowhere", "payload": PAYLOAD})
        refused(nowhere, "unknown-destination", "unknown destination")
        bad_id = await agent.call_tool("get_alert", {"alert_id": "not-an-id"})
        refused(bad_id, "alert-not-found", "malformed id")

        err = await protocol_error(agent.call_tool("send_everything", {}), "unknown tool")
        assert err.code == -32602 and "unknown tool `send_everything`" in err.message, (err.code, err.message)
        assert "approve_alert" in err.message, err.message
    return {}


async def stdio(outboxctl: str, token_file: str, database_url: str) -> dict:
    server = StdioServerParameters(
        command=outboxctl,
        args=["mcp", "--token-file", token_file, "--database-url", database_url],
    )
    async with Client(server, cache=None) as agent:
        tools = (await agent.list_tools()).tools
        assert {tool.name for tool in tools} == TOOLS, [tool.name for tool in tools]
        identity = {**IDENTITY, "subject": "contract:STDIO-1"}
        first = ok(await agent.call_tool("approve_alert", {**identity, "payload": PAYLOAD}), "approve")
        assert first["created"] is True, first
        read = ok(await agent.call_tool("get_alert", {"alert_id": first["alert_id"]}), "get_alert")
        assert read["subject"] == "contract:STDIO-1" and read["evidence"], read
    return {"alert_id": first["alert_id"]}


SCENARIOS = {"flow": flow, "hostile": hostile, "stdio": stdio}

if __name__ == "__main__":
    scenario, *arguments = sys.argv[1:]
    print(json.dumps(asyncio.run(SCENARIOS[scenario](*arguments))))
