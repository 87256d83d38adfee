// What the `eaglevk serve` tests share: starting a server on a free loopback port, running
// `eaglevk run --json` for reference outputs, and a list of failed checks.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

export const failures = [];

// Servers still running when this process ends (a failed check threw) are killed with it.
const running = new Set();
process.on('exit', () => running.forEach((proc) => proc.kill('SIGKILL')));
export function check(ok, what) {
  if (!ok) {
    failures.push(what);
    console.log(`FAILED  ${what}`);
  }
  return ok;
}
export function finish(name) {
  if (failures.length) {
    console.log(`${name}: ${failures.length} check(s) failed`);
    process.exit(1);
  }
  console.log(`${name}: every check passed`);
  process.exit(0);
}

// Runs `eaglevk serve ARGS --host 127.0.0.1 --port 0` and resolves once it listens, with the
// port it printed. The server's log goes to this process's stderr, prefixed.
export function startServer(cli, args, label) {
  return new Promise((resolve, reject) => {
    const proc = spawn(cli, ['serve', ...args, '--host', '127.0.0.1', '--port', '0'], {
      env: { ...process.env, LP_NUM_THREADS: '0' },
      stdio: ['ignore', 'inherit', 'pipe'],
    });
    running.add(proc);
    let log = '';
    const timer = setTimeout(() => reject(new Error(`${label}: no 'serving' line within 90 s:\n${log}`)), 90000);
    proc.stderr.on('data', (chunk) => {
      const text = chunk.toString();
      process.stderr.write(text.replace(/^(?=.)/gm, `[${label}] `));
      log += text;
      const m = log.match(/serving \S+ on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && !proc.port) {
        proc.port = Number(m[1]);
        clearTimeout(timer);
        resolve({ proc, url: `http://127.0.0.1:${proc.port}`, log: () => log });
      }
    });
    proc.on('exit', (code, signal) => {
      running.delete(proc);
      clearTimeout(timer);
      if (!proc.port) reject(new Error(`${label}: exited (${code ?? signal}) before listening:\n${log}`));
    });
  });
}

// Stops a server with SIGTERM and waits for it; resolves with its exit code.
export function stopServer(server) {
  return new Promise((resolve) => {
    if (server.proc.exitCode !== null) return resolve(server.proc.exitCode);
    const timer = setTimeout(() => server.proc.kill('SIGKILL'), 20000);
    server.proc.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
    server.proc.kill('SIGTERM');
  });
}

// `eaglevk run ARGS --json`: its JSON line.
export function runJson(cli, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(cli, ['run', ...args, '--json'], {
      env: { ...process.env, LP_NUM_THREADS: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '', err = '';
    proc.stdout.on('data', (c) => (out += c));
    proc.stderr.on('data', (c) => (err += c));
    proc.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (code !== 0 || !line) return reject(new Error(`eaglevk run ${args.join(' ')} failed (${code}):\n${err}`));
      resolve(JSON.parse(line));
    });
  });
}

// Raw prompts from the tiny model's prompt file: the first words of its first `count` texts.
export function tinyPrompts(assets, count) {
  return readFileSync(`${assets}/tiny-llama3/prompts.jsonl`, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l))
    .filter((p) => p.type === 'raw')
    .slice(0, count)
    .map((p) => p.text.split(' ').slice(0, 6).join(' '));
}

// `run`'s stop reason in the API's words.
export function finishReason(run) {
  return run.stop_reason === 'length' || run.stop_reason === 'context' ? 'length' : 'stop';
}

export function sameIds(a, b) {
  return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => x === b[i]);
}

// The value of a metric line of a /metrics page (0 when absent).
export function metric(page, name) {
  const line = page.split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.slice(name.length + 1)) : 0;
}
