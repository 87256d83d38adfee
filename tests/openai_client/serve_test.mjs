// `eaglevk serve` through the official OpenAI client (the npm package `openai`, pinned by
// package-lock.json): chat, completion, streaming with usage, stop strings, logprobs, an image
// message on tiny-llama4-vision, usage numbers and error shapes; and at temperature 0 every
// answer equals `eaglevk run --json` on the same prompt, computed here, for one client and for 8
// at once, with and without a draft, and with tree drafting (one request at a time); streamed
// logprobs of an image request; --timeout's 503 for a running and a waiting request. Loopback only.
//
//   node serve_test.mjs EAGLEVK ASSETS
import OpenAI from 'openai';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { check, finish, startServer, stopServer, runJson, tinyPrompts, finishReason, sameIds, metric } from './server.mjs';

const [cli, assets] = process.argv.slice(2).map((p) => p && resolve(p));
if (!cli || !assets) {
  console.error('usage: node serve_test.mjs EAGLEVK ASSETS');
  process.exit(2);
}
const target = `${assets}/tiny-llama3`, draft = `${assets}/tiny-llama3-eagle3`;
const vision = `${assets}/tiny-llama4-vision`, images = `${vision}/images`;
const N = 12;  // tokens per answer
const key = 'test-key-4f1c';
const tmp = mkdtempSync(join(tmpdir(), 'eaglevk-serve-'));

const prompts = tinyPrompts(assets, 3);
const chatMessages = [{ role: 'user', content: prompts[1] }];
writeFileSync(join(tmp, 'chat.json'), JSON.stringify(chatMessages));
const imagePath = `${images}/grad_h56_w56.png`;
const imageText = 'Describe this image.';
writeFileSync(join(tmp, 'vision.json'), JSON.stringify([
  { role: 'user', content: [{ type: 'image', image: imagePath }, { type: 'text', text: imageText }] }]));

// The servers load while the references run.
const started = Date.now();
const treeFlags = ['--spec-steps', '3', '--spec-topk', '2', '--spec-draft-tokens', '5'];
const [A, B, V, T, W, refs, refDraft, chatRef, visionRef, treeRef] = await Promise.all([
  startServer(cli, ['-m', target, '-d', draft, '--api-key', key, '--parallel', '8', '--max-queue', '8',
                    '--max-body-mib', '1'], 'draft'),
  startServer(cli, ['-m', target, '--parallel', '8', '--max-queue', '8'], 'plain'),
  startServer(cli, ['-m', vision, '--allowed-image-dir', images, '--parallel', '2'], 'vision'),
  startServer(cli, ['-m', target, '-d', draft, ...treeFlags], 'tree'),
  startServer(cli, ['-m', target, '--parallel', '1', '--timeout', '2'], 'timeout'),
  Promise.all(prompts.map((p) => runJson(cli, ['-m', target, '-p', p, '-n', String(N), '--logprobs', '3']))),
  runJson(cli, ['-m', target, '-d', draft, '-p', prompts[0], '-n', String(N)]),
  runJson(cli, ['-m', target, '--messages', join(tmp, 'chat.json'), '-n', String(N), '--logprobs', '2']),
  runJson(cli, ['-m', vision, '--messages', join(tmp, 'vision.json'), '--allowed-image-dir', images, '-n', '8',
                '--logprobs', '2']),
  runJson(cli, ['-m', target, '-d', draft, ...treeFlags, '-p', prompts[0], '-n', String(N)]),
]);
console.log(`servers up and references made in ${((Date.now() - started) / 1000).toFixed(1)} s`);
check(sameIds(refDraft.tokens, refs[0].tokens), 'run: the draft changes no token at temperature 0');

const client = (server, apiKey = 'unused') =>
  new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60000 });
const a = client(A, key), b = client(B), v = client(V);
const model = 'tiny-llama3';

// ---- equality with run: one client, then 8 at once, with (A) and without (B) a draft -----------
function expectLike(res, ref, what, { chat = false, speculative = false } = {}) {
  const choice = res.choices[0];
  check(sameIds(choice.token_ids, ref.tokens), `${what}: token ids ${JSON.stringify(choice.token_ids)} are run's ${JSON.stringify(ref.tokens)}`);
  const text = chat ? choice.message.content : choice.text;
  check(text === ref.text, `${what}: text ${JSON.stringify(text)} is run's ${JSON.stringify(ref.text)}`);
  check(choice.finish_reason === finishReason(ref), `${what}: finish_reason ${choice.finish_reason} for run's ${ref.stop_reason}`);
  check(res.usage.prompt_tokens === ref.prompt_tokens.length, `${what}: usage.prompt_tokens ${res.usage.prompt_tokens} != ${ref.prompt_tokens.length}`);
  check(res.usage.completion_tokens === ref.tokens.length, `${what}: usage.completion_tokens ${res.usage.completion_tokens} != ${ref.tokens.length}`);
  check(res.usage.total_tokens === ref.prompt_tokens.length + ref.tokens.length, `${what}: usage.total_tokens`);
  const e = res.usage.eaglevk;
  if (speculative) {
    check(e && e.drafts > 0 && e.accepted_tokens <= e.draft_tokens, `${what}: usage.eaglevk counts drafts (${JSON.stringify(e)})`);
    check(e && Math.abs(e.acceptance_length - (1 + e.accepted_tokens / e.drafts)) < 1e-9, `${what}: acceptance_length is 1 + accepted / drafts`);
  } else {
    check(e === undefined, `${what}: no usage.eaglevk without a draft`);
  }
}

const completion = (c, i, extra = {}) =>
  c.completions.create({ model, prompt: prompts[i], max_tokens: N, temperature: 0, return_token_ids: true, ...extra });
const chat = (c, extra = {}) =>
  c.chat.completions.create({ model, messages: chatMessages, max_tokens: N, temperature: 0, return_token_ids: true, ...extra });

for (const [c, name, speculative] of [[a, 'draft', true], [b, 'plain', false]]) {
  for (let i = 0; i < prompts.length; ++i) expectLike(await completion(c, i), refs[i], `${name} completion ${i}`, { speculative });
  expectLike(await chat(c), chatRef, `${name} chat`, { chat: true, speculative });
  // 8 clients at once: the three prompts and the chat, twice each.
  const jobs = [];
  for (let k = 0; k < 8; ++k) jobs.push(k % 4 === 3 ? chat(c) : completion(c, k % 4));
  const answers = await Promise.all(jobs);
  answers.forEach((res, k) => expectLike(res, k % 4 === 3 ? chatRef : refs[k % 4], `${name} concurrent ${k}`,
                                         { chat: k % 4 === 3, speculative }));
}

// ---- streaming ----------------------------------------------------------------------------------
{
  const stream = await a.chat.completions.create({ model, messages: chatMessages, max_tokens: N, temperature: 0,
                                                    stream: true, stream_options: { include_usage: true } });
  let text = '', chunks = 0, finishReasonSeen = null, usage = null, role = null;
  for await (const chunk of stream) {
    ++chunks;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      text += choice.delta.content ?? '';
      if (choice.finish_reason) finishReasonSeen = choice.finish_reason;
    }
  }
  check(text === chatRef.text, `stream: text ${JSON.stringify(text)} is run's ${JSON.stringify(chatRef.text)}`);
  check(role === 'assistant', 'stream: the first delta names the assistant role');
  check(chunks >= 3, `stream: ${chunks} chunks (text, finish, usage at least)`);
  check(finishReasonSeen === finishReason(chatRef), `stream: finish_reason ${finishReasonSeen}`);
  check(usage && usage.completion_tokens === chatRef.tokens.length && usage.prompt_tokens === chatRef.prompt_tokens.length,
        `stream: include_usage gives the usage (${JSON.stringify(usage)})`);

  const plain = await b.completions.create({ model, prompt: prompts[2], max_tokens: N, temperature: 0, stream: true });
  let ctext = '', cusage = null;
  for await (const chunk of plain) {
    ctext += chunk.choices[0]?.text ?? '';
    if (chunk.usage) cusage = chunk.usage;
  }
  check(ctext === refs[2].text, `stream completion: text ${JSON.stringify(ctext)} is run's`);
  check(!cusage, 'stream completion: no usage without include_usage');
}

// ---- stop strings -------------------------------------------------------------------------------
{
  // Two characters from the middle of run's answer: the answer must end just before them.
  const ref = refs[0];
  let at = Math.floor(ref.text.length / 2);
  while (at < ref.text.length - 2 && /\s/.test(ref.text.slice(at, at + 2))) ++at;
  const stop = ref.text.slice(at, at + 2);
  const want = ref.text.slice(0, ref.text.indexOf(stop));
  for (const [c, name] of [[a, 'draft'], [b, 'plain']]) {
    const res = await c.completions.create({ model, prompt: prompts[0], max_tokens: N, temperature: 0, stop: [stop, '\u0000never'] });
    check(res.choices[0].text === want, `${name} stop ${JSON.stringify(stop)}: text ${JSON.stringify(res.choices[0].text)} is ${JSON.stringify(want)}`);
    check(res.choices[0].finish_reason === 'stop', `${name} stop: finish_reason ${res.choices[0].finish_reason}`);
  }
}

// ---- logprobs -----------------------------------------------------------------------------------
{
  const res = await b.completions.create({ model, prompt: prompts[0], max_tokens: N, temperature: 0, logprobs: 3 });
  const lp = res.choices[0].logprobs, ref = refs[0].logprobs;
  check(lp && lp.token_logprobs.length === ref.length, `completion logprobs: ${lp?.token_logprobs.length} entries for ${ref.length}`);
  for (let i = 0; lp && i < Math.min(ref.length, lp.token_logprobs.length); ++i) {
    check(Math.abs(lp.token_logprobs[i] - ref[i].logprob) < 2e-3, `completion logprobs[${i}]: ${lp.token_logprobs[i]} vs run's ${ref[i].logprob}`);
    check(Object.keys(lp.top_logprobs[i]).length >= 1 && Object.keys(lp.top_logprobs[i]).length <= 3, `completion top_logprobs[${i}] has 1..3 entries`);
  }
  const c = await a.chat.completions.create({ model, messages: chatMessages, max_tokens: N, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs?.content ?? [];
  check(content.length === chatRef.logprobs.length, `chat logprobs: ${content.length} entries for ${chatRef.logprobs.length}`);
  content.forEach((t, i) => {
    check(Math.abs(t.logprob - chatRef.logprobs[i].logprob) < 2e-3, `chat logprobs[${i}]: ${t.logprob} vs run's ${chatRef.logprobs[i].logprob}`);
    check(t.top_logprobs.length === 2 && Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6,
          `chat top_logprobs[${i}]: two, the first the greedy token's own`);
  });
}

// ---- streamed logprobs: each chunk carries its tokens' entries; joined, they are the answer's ----
{
  const near = (x, y) => Math.abs(x - y) < 2e-3;
  // Chat, with a draft (several tokens a round).
  const whole = (await a.chat.completions.create({ model, messages: chatMessages, max_tokens: N, temperature: 0,
                                                   logprobs: true, top_logprobs: 2 })).choices[0].logprobs.content;
  const stream = await a.chat.completions.create({ model, messages: chatMessages, max_tokens: N, temperature: 0,
                                                    logprobs: true, top_logprobs: 2, stream: true, return_token_ids: true });
  const content = [];
  let text = '';
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    const entries = choice.logprobs?.content ?? [];
    check(entries.length === (choice.token_ids ?? []).length,
          `stream chat logprobs: a chunk of ${(choice.token_ids ?? []).length} tokens carries ${entries.length} entries`);
    content.push(...entries);
    text += choice.delta.content ?? '';
  }
  check(text === chatRef.text, `stream chat logprobs: text ${JSON.stringify(text)} is run's`);
  check(content.length === whole.length && content.length === chatRef.logprobs.length,
        `stream chat logprobs: ${content.length} entries, the answer has ${whole.length}, run ${chatRef.logprobs.length}`);
  content.forEach((t, i) => {
    const w = whole[i] ?? {}, ref = chatRef.logprobs[i] ?? {};
    check(t.token === w.token && JSON.stringify(t.bytes) === JSON.stringify(w.bytes) && near(t.logprob, w.logprob) &&
          near(t.logprob, ref.logprob), `stream chat logprobs[${i}]: ${JSON.stringify(t)} is the answer's ${JSON.stringify(w)}`);
    check(t.top_logprobs.length === 2 && t.top_logprobs.every((x, k) => x.token === w.top_logprobs?.[k]?.token &&
                                                                    near(x.logprob, w.top_logprobs[k].logprob)),
          `stream chat top_logprobs[${i}]: the answer's`);
  });

  // Completion, without a draft.
  const lp = (await b.completions.create({ model, prompt: prompts[0], max_tokens: N, temperature: 0, logprobs: 3 }))
    .choices[0].logprobs;
  const plain = await b.completions.create({ model, prompt: prompts[0], max_tokens: N, temperature: 0, logprobs: 3,
                                             stream: true, return_token_ids: true });
  const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const chunk of plain) {
    const choice = chunk.choices[0];
    const l = choice.logprobs ?? { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    check(l.tokens.length === (choice.token_ids ?? []).length,
          `stream completion logprobs: a chunk of ${(choice.token_ids ?? []).length} tokens carries ${l.tokens.length} entries`);
    for (const key of Object.keys(joined)) joined[key].push(...l[key]);
  }
  check(JSON.stringify(joined.tokens) === JSON.stringify(lp.tokens) &&
        JSON.stringify(joined.text_offset) === JSON.stringify(lp.text_offset),
        `stream completion logprobs: tokens ${JSON.stringify(joined.tokens)} and offsets ${JSON.stringify(joined.text_offset)} are the answer's`);
  check(joined.token_logprobs.length === refs[0].logprobs.length &&
        joined.token_logprobs.every((x, i) => near(x, lp.token_logprobs[i]) && near(x, refs[0].logprobs[i].logprob)),
        `stream completion logprobs: ${JSON.stringify(joined.token_logprobs)} are the answer's and run's`);
  check(joined.top_logprobs.every((t, i) => JSON.stringify(Object.keys(t)) === JSON.stringify(Object.keys(lp.top_logprobs[i])) &&
                                            Object.keys(t).every((k) => near(t[k], lp.top_logprobs[i][k]))),
        'stream completion top_logprobs: the answer\'s');
}

// ---- an image message on tiny-llama4-vision -----------------------------------------------------
{
  const { readFileSync } = await import('node:fs');
  const dataUrl = `data:image/png;base64,${readFileSync(imagePath).toString('base64')}`;
  const ask = (url) => v.chat.completions.create({
    model: 'tiny-llama4-vision', max_tokens: 8, temperature: 0, return_token_ids: true,
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: imageText }] }] });
  const byData = await ask(dataUrl);
  check(sameIds(byData.choices[0].token_ids, visionRef.tokens), `image as data URL: ${JSON.stringify(byData.choices[0].token_ids)} are run's ${JSON.stringify(visionRef.tokens)}`);
  check(byData.choices[0].message.content === visionRef.text, 'image as data URL: run\'s text');
  // The image's tile tokens count, as the context holds them and run reports them.
  check(byData.usage.prompt_tokens === visionRef.prompt_tokens.length,
        `image as data URL: usage.prompt_tokens ${byData.usage.prompt_tokens}, run's prompt has ${visionRef.prompt_tokens.length}`);
  // Streamed with logprobs: the image request decodes in a Session, which hands them over per token.
  const stream = await v.chat.completions.create({
    model: 'tiny-llama4-vision', max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true,
    return_token_ids: true,
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl } }, { type: 'text', text: imageText }] }] });
  const entries = [], ids = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    const got = choice?.logprobs?.content ?? [];
    check(got.length === (choice?.token_ids ?? []).length,
          `image stream logprobs: a chunk of ${(choice?.token_ids ?? []).length} tokens carries ${got.length} entries`);
    entries.push(...got);
    ids.push(...(choice?.token_ids ?? []));
  }
  check(sameIds(ids, visionRef.tokens), `image stream logprobs: tokens ${JSON.stringify(ids)} are run's`);
  check(entries.length === visionRef.logprobs.length &&
        entries.every((t, i) => Math.abs(t.logprob - visionRef.logprobs[i].logprob) < 2e-3 && t.top_logprobs.length === 2),
        `image stream logprobs: ${JSON.stringify(entries.map((t) => t.logprob))} are run's ${JSON.stringify(visionRef.logprobs.map((t) => t.logprob))}`);
  const byFile = await ask(`file://${imagePath}`);
  check(sameIds(byFile.choices[0].token_ids, visionRef.tokens), 'image as a file under --allowed-image-dir: run\'s tokens');
  for (const [url, words, c, m] of [[`file://${target}/config.json`, 'outside --allowed-image-dir', v, 'tiny-llama4-vision'],
                                    [dataUrl, 'cannot take images', b, model],
                                    ['data:image/png;base64,AAAA', 'image 1', v, 'tiny-llama4-vision']]) {
    try {
      await c.chat.completions.create({ model: m, max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'hi' }] }] });
      check(false, `image ${url.slice(0, 40)}: accepted`);
    } catch (e) {
      check(e.status === 400 && e.message.includes(words), `image ${url.slice(0, 40)}: 400 '${words}', got ${e.status} ${e.message}`);
    }
  }
}

// ---- tree drafting: each request alone in a Session, run's tokens and run's drafts ----------------
{
  const t = client(T);
  const treeAnswer = (res, what) => {
    const choice = res.choices[0], e = res.usage.eaglevk ?? {};
    check(sameIds(choice.token_ids, treeRef.tokens), `${what}: tokens ${JSON.stringify(choice.token_ids)} are run's`);
    check(sameIds(choice.token_ids, refs[0].tokens), `${what}: the tree changes no token at temperature 0`);
    check(e.drafts === treeRef.stats.num_drafts && e.draft_tokens === treeRef.stats.num_draft_tokens &&
          e.accepted_tokens === treeRef.stats.num_accepted_tokens,
          `${what}: usage.eaglevk ${JSON.stringify(e)} counts run's tree drafts ${JSON.stringify(treeRef.stats)}`);
  };
  treeAnswer(await completion(t, 0), 'tree completion');
  // Four at once: they queue and decode one after another, each as if alone.
  const four = await Promise.all([0, 1, 2, 3].map(() => completion(t, 0)));
  four.forEach((res, k) => treeAnswer(res, `tree concurrent ${k}`));
  const stream = await t.completions.create({ model, prompt: prompts[0], max_tokens: N, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  check(text === treeRef.text, `tree stream: text ${JSON.stringify(text)} is run's`);
  const page = await (await fetch(`${T.url}/metrics`)).text();
  check(metric(page, 'eaglevk_sequences_capacity') === 1, 'tree: one sequence at a time (metrics capacity 1)');
}

// ---- --timeout: a request that runs past it and one that waits past it both end with 503 -----------
{
  const w = client(W);
  const long = () => w.completions.create({ model, prompt: prompts[0], max_tokens: 1500, temperature: 0, ignore_eos: true });
  const settled = await Promise.allSettled([long(), long()]);
  check(settled.every((s) => s.status === 'rejected' && s.reason.status === 503 && s.reason.code === 'timeout'),
        `timeout: both long requests end with 503 timeout (${settled.map((s) => s.status === 'rejected' ? `${s.reason.status} ${s.reason.message}` : 'fulfilled')})`);
  // The first is cut at its deadline; the second, queued behind it, is cut either still waiting
  // or soon after it starts (its deadline comes a little after the first's): which, is a race.
  check(settled.some((s) => s.reason?.message?.includes('ran past')) &&
        settled.every((s) => /ran past|waited in the queue past/.test(s.reason?.message ?? '')),
        `timeout: the messages say why (${settled.map((s) => s.reason?.message)})`);
  const after = await completion(w, 0);
  check(sameIds(after.choices[0].token_ids, refs[0].tokens), 'timeout: the server answers the next request whole');
}

// ---- error shapes -------------------------------------------------------------------------------
async function expectError(promise, status, what, test = () => true) {
  try {
    await promise;
    check(false, `${what}: accepted, expected ${status}`);
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.status === status && test(e),
          `${what}: ${status} expected, got ${e.status} ${e.constructor.name} code=${e.code} param=${e.param} ${e.message}`);
  }
}
await expectError(client(A, 'wrong-key').chat.completions.create({ model, messages: chatMessages, max_tokens: 1 }), 401,
                  'bad key', (e) => e.code === 'invalid_api_key' && e.type === 'invalid_request_error');
await expectError(client(A, 'wrong-key').models.list(), 401, 'bad key on /v1/models');
await expectError(a.chat.completions.create({ model: 'gpt-4o', messages: chatMessages, max_tokens: 1 }), 404,
                  'unknown model', (e) => e.code === 'model_not_found' && e.param === 'model');
await expectError(a.chat.completions.create({ model, messages: [{ role: 'user', content: 'x'.repeat(1200000) }], max_tokens: 1 }),
                  413, 'oversize body', (e) => e.code === 'request_too_large');
await expectError(a.chat.completions.create({ model, messages: chatMessages, n: 2 }), 400, 'n = 2', (e) => e.param === 'n');
await expectError(a.chat.completions.create({ model, messages: chatMessages, max_tokens: 0 }), 400, 'max_tokens 0',
                  (e) => e.param === 'max_tokens');
await expectError(a.completions.create({ model, prompt: 'word '.repeat(3000), max_tokens: 1 }), 400, 'prompt past the context',
                  (e) => e.code === 'context_length_exceeded');
{
  const raw = await fetch(`${A.url}/v1/chat/completions`, {
    method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: '{"model": "tiny-llama3", "messages": [' });
  const body = await raw.json();
  check(raw.status === 400 && body.error?.type === 'invalid_request_error' && body.error.message.includes('not valid JSON'),
        `malformed body: 400 with the error object, got ${raw.status} ${JSON.stringify(body)}`);
  const none = await fetch(`${A.url}/v1/models`);
  check(none.status === 401, `no key: 401, got ${none.status}`);
  const health = await fetch(`${A.url}/health`);
  check(health.status === 200, `/health needs no key: ${health.status}`);
  const unknown = await fetch(`${A.url}/v1/embeddings`, { method: 'POST', headers: { Authorization: `Bearer ${key}` }, body: '{}' });
  check(unknown.status === 404 && (await unknown.json()).error?.code === 'unknown_url', `unknown endpoint: 404, got ${unknown.status}`);
  const models = await a.models.list();
  check(models.data.length === 1 && models.data[0].id === model, `/v1/models lists ${model}`);
}
// The queue: 8 decode, 8 wait, the rest are refused at once with 429 (the client does not retry).
{
  const many = [];
  for (let k = 0; k < 24; ++k)
    many.push(b.completions.create({ model, prompt: prompts[k % 3], max_tokens: 40, temperature: 0, ignore_eos: true }));
  const settled = await Promise.allSettled(many);
  const refused = settled.filter((s) => s.status === 'rejected');
  check(refused.length >= 1, `queue full: ${refused.length} of 24 refused`);
  check(refused.every((s) => s.reason.status === 429 && s.reason.code === 'queue_full'),
        `queue full: every refusal is 429 queue_full (${refused.map((s) => `${s.reason.status} ${s.reason.message}`).slice(0, 3)})`);
  check(settled.filter((s) => s.status === 'fulfilled').every((s) => s.value.usage.completion_tokens === 40),
        'queue full: the accepted ones finish whole');
}
// A client that goes away mid-stream frees its sequence at the next round: far fewer than its
// max_tokens are generated, and the sequence counts as cancelled.
{
  const page = async () => (await fetch(`${A.url}/metrics`, { headers: { Authorization: `Bearer ${key}` } })).text();
  const before = await page();
  const stream = await a.completions.create({ model, prompt: prompts[0], max_tokens: 1000, temperature: 0,
                                              ignore_eos: true, stream: true });
  for await (const chunk of stream) {
    if (chunk.choices[0]?.text) break;  // leaving the loop aborts the request
  }
  let after = '';
  for (let tries = 0; tries < 100; ++tries) {
    after = await page();
    if (metric(after, 'eaglevk_sequences_running') === 0 &&
        metric(after, 'eaglevk_sequences_cancelled_total') > metric(before, 'eaglevk_sequences_cancelled_total')) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const generated = metric(after, 'eaglevk_generated_tokens_total') - metric(before, 'eaglevk_generated_tokens_total');
  check(metric(after, 'eaglevk_sequences_cancelled_total') === metric(before, 'eaglevk_sequences_cancelled_total') + 1,
        'dropped stream: its sequence is cancelled');
  check(metric(after, 'eaglevk_sequences_running') === 0 && generated < 500,
        `dropped stream: freed after ${generated} of 1000 tokens`);
}
{
  const page = await (await fetch(`${A.url}/metrics`, { headers: { Authorization: `Bearer ${key}` } })).text();
  check(metric(page, 'eaglevk_generated_tokens_total') > 0 && metric(page, 'eaglevk_drafts_total') > 0,
        'metrics: generated tokens and drafts counted');
  check(metric(page, 'eaglevk_requests_total{endpoint="/v1/chat/completions",status="401"}') === 1, 'metrics: the 401 counted');
}

for (const [server, name] of [[A, 'draft'], [B, 'plain'], [V, 'vision'], [T, 'tree'], [W, 'timeout']])
  check((await stopServer(server)) === 0, `${name} server exits 0 on SIGTERM`);
rmSync(tmp, { recursive: true, force: true });
finish('serve_test');
