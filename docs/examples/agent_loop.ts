// One run of a monitoring agent, with TypeScript types generated from docs/openapi.json
// (openapi-typescript) and the openapi-fetch client that reads them:
//
//   npx openapi-typescript docs/openapi.json -o outbox-api.d.ts
//   npx tsc --strict --module nodenext --target es2022 agent_loop.ts
//   node agent_loop.js http://127.0.0.1:8080 "$TOKEN" [--lose-first-answer]
//
// The agent found that contract ACME-7 renews on 2027-01-31 and is 30 days out. It
// approves one alert for that fact and reads where the alert stands. The identity
// (destination, subject, occurrence) comes from the fact, never from the run: a rerun, or a
// retry after a lost answer, names the same alert, and the outbox answers 200 with the
// alert made the first time instead of making a second one.

import createClient from "openapi-fetch";
import type { components, paths } from "./outbox-api.js";

type ApproveRequest = components["schemas"]["ApproveRequest"];
type AlertDetail = components["schemas"]["AlertDetail"];

const approval: ApproveRequest = {
  destination: "ops",
  subject: "contract:ACME-7",
  occurrence: "2027-01-31/30d",
  payload: { vendor: "Acme Tools", amount: "12000.00", currency: "EUR", days_remaining: 30 },
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function approve(
  client: ReturnType<typeof createClient<paths>>,
): Promise<{ alert: AlertDetail; created: boolean }> {
  for (let attempt = 0; attempt < 6; attempt++) {
    let result;
    try {
      result = await client.POST("/v1/alerts", { body: approval });
    } catch {
      // The answer was lost: the alert may or may not exist. Asking again with the same
      // identity is safe either way.
      await sleep(Math.min(200 * 2 ** attempt, 5000));
      continue;
    }
    const { data, error, response } = result;
    if (data) {
      return { alert: data, created: response.status === 201 };
    }
    if (response.status === 503) {
      // The database is busy or failing over; the answer says when to come back.
      await sleep(1000 * Number(response.headers.get("retry-after") ?? "1"));
      continue;
    }
    // A 409 means this identity already has another payload (a correction is a revision,
    // with a reason); a 422 names the field to fix. Retrying would not change it.
    throw new Error(`approval refused (${response.status} ${error?.type}): ${error?.detail}`);
  }
  throw new Error("the approval API did not answer; the next run will ask again");
}

async function main(): Promise<void> {
  const [baseUrl, token, ...flags] = process.argv.slice(2);
  const headers = { Authorization: `Bearer ${token}` };
  if (flags.includes("--lose-first-answer")) {
    // Sends the approval and drops the answer unread, as a timeout would.
    await fetch(`${baseUrl}/v1/alerts`, {
      method: "POST",
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify(approval),
    }).then((response) => response.body?.cancel());
  }
  const client = createClient<paths>({ baseUrl, headers });
  const { alert, created } = await approve(client);
  // `uncertain` and `held` mean: do not send it again yourself; the outbox settles it, or
  // an operator does.
  const shown = await client.GET("/v1/alerts/{id}", { params: { path: { id: alert.id } } });
  console.log(JSON.stringify({ id: alert.id, created, state: shown.data?.state }));
}

main().catch((error) => {
  console.error(String(error));
  process.exit(1);
});
