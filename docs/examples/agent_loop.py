"""One run of a monitoring agent, with the Python client generated from docs/openapi.json.

    openapi-python-client generate --path docs/openapi.json --output-path outbox-client
    PYTHONPATH=outbox-client python docs/examples/agent_loop.py http://127.0.0.1:8080 "$TOKEN"

The agent found that contract ACME-7 renews on 2027-01-31 and is 30 days out. It approves
one alert for that fact and reads where the alert stands. The identity (destination,
subject, occurrence) comes from the fact, never from the run: a rerun tomorrow, or a retry
after a lost answer, names the same alert, and the outbox answers 200 with the alert made
the first time instead of making a second one.

`--lose-first-answer` sends the first approval and drops its answer unread, as a timeout
or a dropped connection would; the retry then finds the alert already made.
"""

import json
import sys
import time

import httpx

from alert_outbox_approval_api_client import AuthenticatedClient
from alert_outbox_approval_api_client.api.alerts import approve_alert, get_alert
from alert_outbox_approval_api_client.models import ApproveRequest, ApproveRequestPayload

# The fact the agent found, and the alert's identity derived from it.
CONTRACT = "ACME-7"
RENEWAL_DATE = "2027-01-31"
TIER = "30d"
APPROVAL = ApproveRequest(
    destination="ops",
    subject=f"contract:{CONTRACT}",
    occurrence=f"{RENEWAL_DATE}/{TIER}",
    payload=ApproveRequestPayload.from_dict(
        {"vendor": "Acme Tools", "amount": "12000.00", "currency": "EUR", "days_remaining": 30}
    ),
)


def approve(client: AuthenticatedClient, attempts: int = 6):
    """Approves the alert, retrying what may be retried; returns (alert, created)."""
    for attempt in range(attempts):
        try:
            response = approve_alert.sync_detailed(client=client, body=APPROVAL)
        except httpx.TransportError:
            # The answer was lost: the alert may or may not exist. Asking again with the
            # same identity is safe either way.
            time.sleep(min(0.2 * 2**attempt, 5))
            continue
        if response.status_code in (200, 201):
            return response.parsed, response.status_code == 201
        if response.status_code == 503:
            # The database is busy or failing over; the answer says when to come back.
            time.sleep(float(response.headers.get("retry-after", "1")))
            continue
        # Anything else is a decision, not an accident: a 409 means this identity already
        # has another payload (a correction is a revision, with a reason), a 422 names the
        # field to fix. Retrying would not change it.
        problem = response.parsed
        sys.exit(f"approval refused ({response.status_code} {problem.type_}): {problem.detail}")
    sys.exit("the approval API did not answer; the next run will ask again")


def lose_an_answer(base_url: str, token: str) -> None:
    """Sends the approval and drops the answer unread."""
    httpx.post(
        f"{base_url}/v1/alerts",
        headers={"Authorization": f"Bearer {token}"},
        json=APPROVAL.to_dict(),
    ).close()


def main() -> None:
    base_url, token = sys.argv[1], sys.argv[2]
    if "--lose-first-answer" in sys.argv[3:]:
        lose_an_answer(base_url, token)
    client = AuthenticatedClient(base_url=base_url, token=token)
    alert, created = approve(client)
    # Where it stands now. `uncertain` and `held` mean: do not send it again yourself;
    # the outbox settles it, or an operator does.
    shown = get_alert.sync(client=client, id=str(alert.id))
    print(json.dumps({"id": str(alert.id), "created": created, "state": shown.state.value}))


if __name__ == "__main__":
    main()
