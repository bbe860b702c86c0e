/** Reading the sidecar's Prometheus text in tests. */

/** The value of one sample (labels given in any order); 0 when absent. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const open = line.indexOf('{');
    const close = line.lastIndexOf('}');
    const have = new Map<string, string>();
    if (open > 0 && open < name.length + 1) {
      for (const m of line.slice(open + 1, close).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) have.set(m[1] as string, m[2] as string);
    }
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}
