/**
 * The fenced blocks of a Markdown file and what their annotation says to do
 * with them. Every fenced block must be annotated by an HTML comment on the
 * line before its opening fence (blank lines between are allowed):
 *
 *   <!-- readme: run -->                    a shell block, run as written
 *   <!-- readme: run needs=python-openai --> run when the Python openai package is importable
 *   <!-- readme: file client.mjs -->        a code block saved under this name (a later block runs it)
 *   <!-- readme: skip <reason> -->          not run, for the reason given (required)
 *   <!-- readme: output -->                 what a command prints; not run
 *
 * A block without an annotation, a skip without a reason or an unknown
 * directive is a problem: nothing is skipped silently.
 */
export type BlockAction =
  | { readonly kind: 'run'; readonly needs: string | null }
  | { readonly kind: 'file'; readonly name: string }
  | { readonly kind: 'skip'; readonly reason: string }
  | { readonly kind: 'output' };

export interface Block {
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly lang: string;
  readonly text: string;
  readonly action: BlockAction | null;
  readonly problem: string | null;
}

const ANNOTATION = /^<!--\s*readme:\s*(.*?)\s*-->$/;

function parseAction(spec: string): { action: BlockAction | null; problem: string | null } {
  const [directive = '', ...rest] = spec.split(/\s+/);
  const arg = rest.join(' ').trim();
  switch (directive) {
    case 'run': {
      if (!arg) return { action: { kind: 'run', needs: null }, problem: null };
      const m = /^needs=([\w-]+)$/.exec(arg);
      return m ? { action: { kind: 'run', needs: m[1]! }, problem: null } : { action: null, problem: `unknown run option "${arg}"` };
    }
    case 'file':
      return /^[\w.-]+$/.test(arg) ? { action: { kind: 'file', name: arg }, problem: null } : { action: null, problem: 'file needs a plain file name' };
    case 'skip':
      return arg ? { action: { kind: 'skip', reason: arg }, problem: null } : { action: null, problem: 'skip needs a reason' };
    case 'output':
      return { action: { kind: 'output' }, problem: null };
    default:
      return { action: null, problem: `unknown directive "${directive}"` };
  }
}

export function readmeBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,})\s*([\w-]*)/.exec(lines[i]!);
    if (!open) continue;
    const fence = open[1]!;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith(fence); i++) body.push(lines[i]!);
    let j = start - 1;
    while (j >= 0 && lines[j]!.trim() === '') j--;
    const note = j >= 0 ? ANNOTATION.exec(lines[j]!.trim()) : null;
    const parsed = note ? parseAction(note[1]!) : { action: null, problem: 'no <!-- readme: … --> annotation' };
    blocks.push({ line: start + 1, lang: open[2] ?? '', text: body.join('\n'), ...parsed });
  }
  return blocks;
}
