// Stripe's v1 request bodies: application/x-www-form-urlencoded with bracketed names for
// nested values (`metadata[charge_id]=…`, `payment_method_types[0]=card`, `a[]=x`), as the
// `stripe` package's stringifier writes them.

export type FormValue = string | FormObject;
export interface FormObject {
  [name: string]: FormValue;
}

/** The segments of `a[b][0]`: ["a", "b", "0"]; `a[]` gives "" for the last, meaning "append". */
function segments(name: string): string[] | undefined {
  const open = name.indexOf("[");
  if (open === -1) return [name];
  const parts = [name.slice(0, open)];
  const rest = name.slice(open);
  const pattern = /\[([^\[\]]*)\]/gy;
  let consumed = 0;
  for (let match = pattern.exec(rest); match; match = pattern.exec(rest)) {
    parts.push(match[1] ?? "");
    consumed = pattern.lastIndex;
  }
  return consumed === rest.length && parts[0] !== "" ? parts : undefined;
}

/** Parses a form body (or a query string); undefined when a name is not well bracketed or a value clashes. */
export function parseForm(text: string): FormObject | undefined {
  const root: FormObject = {};
  for (const [name, value] of new URLSearchParams(text)) {
    const path = segments(name);
    if (!path || !place(root, path, value)) return undefined;
  }
  return root;
}

function place(root: FormObject, path: string[], value: string): boolean {
  let node = root;
  for (let i = 0; i < path.length - 1; i++) {
    const key = keyIn(node, path[i] ?? "");
    const next = node[key];
    if (typeof next === "string") return false;
    node = next ?? (node[key] = {});
  }
  const last = keyIn(node, path[path.length - 1] ?? "");
  if (typeof node[last] === "object") return false;
  node[last] = value;
  return true;
}

/** `[]` appends: the next index of the object used as an array. */
function keyIn(node: FormObject, key: string): string {
  return key === "" ? String(Object.keys(node).length) : key;
}

/** A canonical text of the parameters: the same parameters in another order give the same text. */
export function canonical(value: FormValue): string {
  if (typeof value === "string") return JSON.stringify(value);
  const keys = Object.keys(value).sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical(value[key] ?? "")}`).join(",")}}`;
}

/** The elements of a form "array" (an object keyed 0, 1, …), in index order; undefined when it is not one. */
export function formList(value: FormValue | undefined): string[] | undefined {
  if (value === undefined || typeof value === "string") return undefined;
  const keys = Object.keys(value);
  if (!keys.every((key) => /^\d+$/.test(key))) return undefined;
  const items = keys.sort((a, b) => Number(a) - Number(b)).map((key) => value[key]);
  return items.every((item): item is string => typeof item === "string") ? items : undefined;
}
