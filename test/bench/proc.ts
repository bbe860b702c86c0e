/** CPU and memory of processes from Linux /proc (NaN elsewhere). */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of a process in ms, or NaN. */
export function procCpuMs(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
  } catch {
    return NaN;
  }
}

/** CPU ms by process name, plus this process as `bench`. */
export function cpuSnapshot(pids: Record<string, number | undefined>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) out[name] = procCpuMs(pid);
  const self = process.cpuUsage();
  out.bench = (self.user + self.system) / 1000;
  return out;
}

/** Adds after - before, by process, into `into`. */
export function addCpu(into: Record<string, number>, before: Record<string, number>, after: Record<string, number>): void {
  for (const [name, v] of Object.entries(after)) into[name] = (into[name] ?? 0) + (v - (before[name] ?? NaN));
}

/** Resident set now (VmRSS) and its high-water mark since the process started (VmHWM), MiB; NaN when unknown. */
export function procMemMb(pid: number | undefined): { rss: number; peak: number } {
  if (pid === undefined) return { rss: NaN, peak: NaN };
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
    return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
  } catch {
    return { rss: NaN, peak: NaN };
  }
}
