// Kubernetes label selectors as the config gives them: `{ matchLabels }` or
// the API's selector string. Checked here, when the config is read, so a typo
// is refused with the field named instead of surfacing as a 400 from every
// list the discovery source retries.

/** A label name, or a value when not empty: 63 characters at most. */
const NAME = "[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?";
const DNS_SUBDOMAIN = "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*";
const KEY = `(?:${DNS_SUBDOMAIN}/)?${NAME}`;
const VALUE = `(?:${NAME})?`;

const LABEL_KEY = new RegExp(`^${KEY}$`);
const LABEL_VALUE = new RegExp(`^${VALUE}$`);

/** The requirement forms of the API's selector grammar (k8s.io/apimachinery labels.Parse). */
const REQUIREMENTS = [
  new RegExp(`^!?\\s*${KEY}$`), // exists / does not exist
  new RegExp(`^${KEY}\\s*(?:==|=|!=)\\s*${VALUE}$`),
  new RegExp(`^${KEY}\\s+(?:in|notin)\\s*\\(\\s*${VALUE}(?:\\s*,\\s*${VALUE})*\\s*\\)$`),
  new RegExp(`^${KEY}\\s*[<>]\\s*\\d+$`),
];

export const LABEL_KEY_TEXT = "expected a label name ([prefix/]name: letters, digits, - _ . ; 63 characters at most)";
export const LABEL_VALUE_TEXT = "expected a label value (a string of letters, digits, - _ . ; 63 characters at most; quote numbers and booleans)";
export function isLabelKey(key: string): boolean {
  // NAME bounds the name part; a prefix (a DNS subdomain) may have 253 characters.
  return LABEL_KEY.test(key) && key.lastIndexOf("/") <= 253;
}

export function isLabelValue(value: unknown): value is string {
  return typeof value === "string" && LABEL_VALUE.test(value);
}

/** Splits at the commas between requirements, not those inside `in (a,b)`. */
function requirements(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "(") depth++;
    else if (text[i] === ")") depth--;
    else if (text[i] === "," && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts.map((p) => p.trim());
}

/** What is wrong with a selector string, or null when it reads as one. */
export function selectorProblem(text: string): string | null {
  if (text.trim() === "") return "expected a non-empty label selector (an empty one selects every pod in the namespace)";
  for (const part of requirements(text)) {
    if (!REQUIREMENTS.some((re) => re.test(part))) {
      return `expected a label selector such as "app=vllm,tier in (a,b)"; cannot read ${JSON.stringify(part)}`;
    }
  }
  return null;
}

/** `{ a: x, b: y }` as the selector string `a=x,b=y`. */
export function matchLabelsSelector(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}
