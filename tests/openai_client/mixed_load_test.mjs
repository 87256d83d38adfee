// Requests of mixed sampling settings on one `eaglevk serve` (with a draft, --parallel 8):
// greedy beside T = 0.7 and 1.0 with their own seeds, top-p and top-k, all at once. Each answer
// equals the same request sent alone before the load (a row samples with its own settings and
// its draws are keyed by its seed and position, so its neighbours change nothing), and the
// server decodes them together: /metrics must show more than one sequence running in a round
// at some point, which the admission rule of old (a request whose settings differ waits for
// the batch to drain) made impossible for a mix. Prints requests/s, tokens/s and the p50/p99
// request latency as one JSON line (`--bench` skips the checks against the lone answers and
// only measures, for old-build-against-new comparisons).
//
//   node mixed_load_test.mjs EAGLEVK ASSETS [--bench]
import OpenAI from 'openai';
import { resolve } from 'node:path';
import { check, finish, startServer, stopServer, tinyPrompts, sameIds, metric } from './server.mjs';

const args = process.argv.slice(2);
const bench = args.includes('--bench');
const [cli, assets] = args.filter((a) => !a.startsWith('--')).map((p) => p && resolve(p));
if (!cli || !assets) {
  console.error('usage: node mixed_load_test.mjs EAGLEVK ASSETS [--bench]');
  process.exit(2);
}
const CLIENTS = 8, REQUESTS = 4, TOKENS = 16;
const model = 'tiny-llama3';
const prompts = tinyPrompts(assets, 4);
// Six settings, greedy twice (with and without top-p, which greedy ignores).
const settings = [
  { temperature: 0 },
  { temperature: 0.7, seed: 11 },
  { temperature: 0.7, seed: 12, top_p: 0.9 },
  { temperature: 1.0, seed: 5, top_k: 20 },
  { temperature: 0, top_p: 0.5 },
  { temperature: 1.0, seed: 99 },
];
const server = await startServer(cli, ['-m', `${assets}/tiny-llama3`, '-d', `${assets}/tiny-llama3-eagle3`,
                                       '--parallel', '8', '--max-queue', '64', '--timeout', '120'], 'mixed');
const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 90000 });
const request = (i, s) => ({ model, prompt: prompts[i % prompts.length], max_tokens: TOKENS, ...settings[s],
                             return_token_ids: true });
const key = (c, r) => [(c + r) % prompts.length, (c * 5 + r) % settings.length];

// Every (prompt, settings) pair the load sends, alone first: what its answer under load must be.
const alone = new Map();
if (!bench)
  for (let c = 0; c < CLIENTS; ++c)
    for (let r = 0; r < REQUESTS; ++r) {
      const [i, s] = key(c, r);
      if (!alone.has(`${i}/${s}`)) alone.set(`${i}/${s}`, (await client.completions.create(request(i, s))).choices[0].token_ids);
    }
else  // one untimed request builds the pipelines
  await client.completions.create(request(0, 0));

// Polls /metrics while the load runs: the most sequences seen running at once.
let mostRunning = 0, polling = true;
const poller = (async () => {
  while (polling) {
    const page = await (await fetch(`${server.url}/metrics`)).text();
    mostRunning = Math.max(mostRunning, metric(page, 'eaglevk_sequences_running'));
    await new Promise((r) => setTimeout(r, 20));
  }
})();
const latencies = [];
let tokens = 0;
const started = Date.now();
async function one(c, r) {
  const [i, s] = key(c, r);
  const t0 = Date.now();
  const res = await client.completions.create(request(i, s));
  latencies.push((Date.now() - t0) / 1000);
  tokens += res.usage.completion_tokens;
  if (!bench)
    check(sameIds(res.choices[0].token_ids, alone.get(`${i}/${s}`)),
          `client ${c} request ${r} (prompt ${i}, ${JSON.stringify(settings[s])}): ids ` +
            `${JSON.stringify(res.choices[0].token_ids)} are those alone, ${JSON.stringify(alone.get(`${i}/${s}`))}`);
}
const clients = [];
for (let c = 0; c < CLIENTS; ++c)
  clients.push((async () => { for (let r = 0; r < REQUESTS; ++r) await one(c, r); })());
const results = await Promise.allSettled(clients);
const seconds = (Date.now() - started) / 1000;
polling = false;
await poller;
results.filter((s) => s.status === 'rejected').forEach((s) => check(false, `a client failed: ${s.reason}`));
const sorted = [...latencies].sort((a, b) => a - b);
const rank = (f) => sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(f * sorted.length) - 1)] : 0;
console.log(JSON.stringify({ clients: CLIENTS, requests: latencies.length, seconds: +seconds.toFixed(2),
                             requests_per_s: +(latencies.length / seconds).toFixed(3),
                             tokens_per_s: +(tokens / seconds).toFixed(1), p50_s: +rank(0.5).toFixed(3),
                             p99_s: +rank(0.99).toFixed(3), most_running: mostRunning }));
check(latencies.length === CLIENTS * REQUESTS, `${CLIENTS * REQUESTS} answers (${latencies.length})`);
if (!bench) check(mostRunning >= 5, `requests of different settings decode together (at most ${mostRunning} ran at once)`);
check((await stopServer(server)) === 0, 'the server exits 0 on SIGTERM');
finish('mixed_load_test');
