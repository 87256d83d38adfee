// A bounded load on `eaglevk serve` (with a draft): 16 clients, 5 requests each, of mixed
// prompts and lengths, a third streamed and some of those dropped after their first chunk.
// Every answer that completes equals the server's own answer to the same prompt alone (its
// first max_tokens tokens; greedy decoding does not depend on what runs beside it), nothing
// hangs, the process's resident memory comes back near its level, and /metrics adds up.
//
//   node load_test.mjs EAGLEVK ASSETS
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { check, finish, startServer, stopServer, tinyPrompts, sameIds, metric } from './server.mjs';

const [cli, assets] = process.argv.slice(2).map((p) => p && resolve(p));
if (!cli || !assets) {
  console.error('usage: node load_test.mjs EAGLEVK ASSETS');
  process.exit(2);
}
const CLIENTS = 16, REQUESTS = 5, LONGEST = 16;
const model = 'tiny-llama3';
const prompts = tinyPrompts(assets, 4);
const server = await startServer(cli, ['-m', `${assets}/tiny-llama3`, '-d', `${assets}/tiny-llama3-eagle3`,
                                       '--parallel', '8', '--max-queue', '64', '--timeout', '120'], 'load');
const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 90000 });
const rss = () => Number(readFileSync(`/proc/${server.proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) * 1024;

// Each prompt alone, LONGEST tokens: what every answer under load must begin with.
const alone = [];
for (const prompt of prompts)
  alone.push(await client.completions.create({ model, prompt, max_tokens: LONGEST, temperature: 0, return_token_ids: true }));
// A first round of the same mix settles the allocations a busy server makes once.
const warm = [];
for (let k = 0; k < 8; ++k)
  warm.push(client.completions.create({ model, prompt: prompts[k % 4], max_tokens: LONGEST, temperature: 0 }));
const warmed = await Promise.all(warm);
const rssBefore = rss();

let completed = 0, cancelled = 0, completionTokens = 0;
const started = Date.now();
async function one(c, r) {
  const i = (c + r) % prompts.length;
  const maxTokens = 4 + ((c * 7 + r * 3) % (LONGEST - 3));  // 4..16
  const want = alone[i].choices[0].token_ids.slice(0, maxTokens);
  const wantText = maxTokens === LONGEST ? alone[i].choices[0].text : null;
  const what = `client ${c} request ${r} (prompt ${i}, ${maxTokens} tokens)`;
  if ((c + r) % 3 === 0) {
    const stream = await client.completions.create({ model, prompt: prompts[i], max_tokens: maxTokens, temperature: 0,
                                                     stream: true, stream_options: { include_usage: true },
                                                     return_token_ids: true });
    const drop = c % 4 === 0;  // these clients go away after the first chunk
    let ids = [], text = '', usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        ids.push(...(choice.token_ids ?? []));
        text += choice.text;
      }
      if (drop) {
        stream.controller.abort();
        ++cancelled;
        return;
      }
    }
    check(sameIds(ids, want), `${what}, streamed: ids ${JSON.stringify(ids)} are ${JSON.stringify(want)}`);
    if (wantText !== null) check(text === wantText, `${what}, streamed: the text alone`);
    check(usage && usage.completion_tokens === ids.length, `${what}, streamed: usage counts ${ids.length} tokens`);
    completionTokens += ids.length;
  } else {
    const res = await client.completions.create({ model, prompt: prompts[i], max_tokens: maxTokens, temperature: 0,
                                                  return_token_ids: true });
    check(sameIds(res.choices[0].token_ids, want), `${what}: ids ${JSON.stringify(res.choices[0].token_ids)} are ${JSON.stringify(want)}`);
    if (wantText !== null) check(res.choices[0].text === wantText, `${what}: the text alone`);
    check(res.usage.completion_tokens === res.choices[0].token_ids.length, `${what}: usage counts the tokens`);
    completionTokens += res.usage.completion_tokens;
  }
  ++completed;
}
const clients = [];
for (let c = 0; c < CLIENTS; ++c)
  clients.push((async () => { for (let r = 0; r < REQUESTS; ++r) await one(c, r); })());
const results = await Promise.allSettled(clients);
results.filter((s) => s.status === 'rejected').forEach((s) => check(false, `a client failed: ${s.reason}`));
console.log(`${completed} answers and ${cancelled} dropped streams in ${((Date.now() - started) / 1000).toFixed(1)} s`);

// The dropped streams end at the next round; then nothing runs or waits.
let page = '';
for (let tries = 0; tries < 100; ++tries) {
  page = await (await fetch(`${server.url}/metrics`)).text();
  if (metric(page, 'eaglevk_sequences_running') === 0 && metric(page, 'eaglevk_queue_length') === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
check(metric(page, 'eaglevk_sequences_running') === 0 && metric(page, 'eaglevk_queue_length') === 0,
      'metrics: nothing runs or waits at the end');
const before = alone.length + warm.length;
check(metric(page, 'eaglevk_requests_total{endpoint="/v1/completions",status="200"}') === before + completed,
      `metrics: ${before + completed} answered 200`);
check(metric(page, 'eaglevk_sequences_total') === before + completed + cancelled,
      `metrics: ${before + completed + cancelled} sequences (${metric(page, 'eaglevk_sequences_total')})`);
const warmTokens = [...alone, ...warmed].reduce((n, a) => n + a.usage.completion_tokens, 0);
const generated = metric(page, 'eaglevk_generated_tokens_total') - warmTokens;
check(generated >= completionTokens && generated <= completionTokens + cancelled * LONGEST,
      `metrics: ${generated} generated tokens under load, answers counted ${completionTokens} (+ at most ${cancelled * LONGEST} dropped)`);
check(metric(page, 'eaglevk_sequences_cancelled_total') <= cancelled, 'metrics: cancelled sequences are dropped streams');
check(metric(page, 'eaglevk_drafts_total') > 0 && metric(page, 'eaglevk_acceptance_length') > 1, 'metrics: speculation counted');
const rssAfter = rss();
console.log(`resident memory ${(rssBefore / 2 ** 20).toFixed(0)} MiB before the load, ${(rssAfter / 2 ** 20).toFixed(0)} MiB after`);
check(rssAfter <= rssBefore * 1.25 + 32 * 2 ** 20, 'resident memory comes back near its level');
check((await stopServer(server)) === 0, 'the server exits 0 on SIGTERM');
finish('load_test');
