// Generates TypeScript (ts-proto, grpc-js flavour) from the project's own
// protobuf definitions in proto/. protoc comes from the PyPI grpcio-tools
// wheel, vendored under .tools/grpcio-tools (installed on demand).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, rm, rmdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve, sep } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './paths.js';

const execFileAsync = promisify(execFile);

export const PROTO_DIR = join(REPO_ROOT, 'proto');
export const DEFAULT_OUT_DIR = join(REPO_ROOT, 'sidecar', 'src', 'generated');
export const GRPC_TOOLS_DIR = join(REPO_ROOT, '.tools', 'grpcio-tools');
export const GRPC_TOOLS_VERSION = '1.68.1';
/** Well-known types (google/protobuf/*.proto) bundled with grpcio-tools. */
export const WELL_KNOWN_PROTO_DIR = join(GRPC_TOOLS_DIR, 'grpc_tools', '_proto');
export const TS_PROTO_PLUGIN = join(REPO_ROOT, 'node_modules', '.bin', 'protoc-gen-ts_proto');

/** ts-proto options; changing these changes the committed output. */
export const TS_PROTO_OPTIONS: readonly string[] = [
  'outputServices=grpc-js',
  'env=node',
  'esModuleInterop=true',
  'forceLong=number',
  'importSuffix=.js',
  'outputJsonMethods=false',
  'useOptionals=messages',
  'oneof=properties',
  'useDate=false',
  'outputTypeRegistry=false',
];

const PYTHON = process.env['PYTHON'] ?? 'python3';

export class ProtocUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ProtocUnavailableError';
  }
}

function errText(err: unknown): string {
  if (err && typeof err === 'object') {
    const e = err as { message?: unknown; stderr?: unknown };
    const stderr = typeof e.stderr === 'string' ? e.stderr.trim() : '';
    return [String(e.message ?? err), stderr].filter(Boolean).join('\n');
  }
  return String(err);
}

function pythonEnv(): NodeJS.ProcessEnv {
  return { ...process.env, PYTHONPATH: GRPC_TOOLS_DIR, PYTHONDONTWRITEBYTECODE: '1' };
}

async function protocWorks(): Promise<boolean> {
  if (!existsSync(join(GRPC_TOOLS_DIR, 'grpc_tools', 'protoc.py'))) return false;
  try {
    await execFileAsync(PYTHON, ['-m', 'grpc_tools.protoc', '--version'], { env: pythonEnv() });
    return true;
  } catch {
    return false;
  }
}

/**
 * Makes sure protoc (grpcio-tools) is usable, installing
 * grpcio-tools==GRPC_TOOLS_VERSION into .tools/grpcio-tools if needed.
 * Throws ProtocUnavailableError with an actionable message otherwise.
 */
export async function ensureProtoc(): Promise<void> {
  if (existsSync(GRPC_TOOLS_DIR)) {
    // The protoc version is stamped into every generated file, so a different
    // grpcio-tools would make the drift check fail for no real reason.
    const dists = (await readdir(GRPC_TOOLS_DIR)).filter((n) => /^grpcio_tools-.*\.dist-info$/.test(n));
    const wanted = `grpcio_tools-${GRPC_TOOLS_VERSION}.dist-info`;
    if (dists.length > 0 && !dists.includes(wanted)) {
      throw new ProtocUnavailableError(
        `${GRPC_TOOLS_DIR} holds ${dists.join(', ')} but grpcio-tools==${GRPC_TOOLS_VERSION} is required; ` +
          `delete that directory and rerun to reinstall`,
      );
    }
  }
  if (await protocWorks()) return;
  try {
    await execFileAsync(
      PYTHON,
      ['-m', 'pip', 'install', '--quiet', '--target', GRPC_TOOLS_DIR, `grpcio-tools==${GRPC_TOOLS_VERSION}`],
      { env: process.env, maxBuffer: 16 * 1024 * 1024 },
    );
  } catch (err) {
    throw new ProtocUnavailableError(
      `protoc is not usable ("${PYTHON} -m grpc_tools.protoc" with PYTHONPATH=${GRPC_TOOLS_DIR}) and ` +
        `installing grpcio-tools==${GRPC_TOOLS_VERSION} with "${PYTHON} -m pip install --target" failed ` +
        `(set PYTHON to choose the interpreter):\n${errText(err)}`,
      { cause: err },
    );
  }
  if (!(await protocWorks())) {
    throw new ProtocUnavailableError(
      `grpcio-tools==${GRPC_TOOLS_VERSION} was installed into ${GRPC_TOOLS_DIR} but ` +
        `"${PYTHON} -m grpc_tools.protoc --version" still fails`,
    );
  }
}

async function listFiles(dir: string, suffix: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string): Promise<void> => {
    for (const entry of await readdir(d, { withFileTypes: true })) {
      const p = join(d, entry.name);
      if (entry.isDirectory()) await walk(p);
      else if (entry.isFile() && entry.name.endsWith(suffix)) out.push(p);
    }
  };
  await walk(dir);
  return out.map((p) => relative(dir, p).split(sep).join('/')).sort();
}

/** All .proto files under proto/, as paths relative to it, sorted. */
export function listProtoFiles(): Promise<string[]> {
  return listFiles(PROTO_DIR, '.proto');
}

/** Relative paths of generated .ts files under dir, sorted. */
export function listGeneratedFiles(dir: string): Promise<string[]> {
  return listFiles(dir, '.ts');
}

/** Removes previously generated .ts files (and then-empty folders) from dir. */
async function clearGenerated(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  for (const f of await listGeneratedFiles(dir)) await rm(join(dir, f));
  const prune = async (d: string): Promise<void> => {
    for (const entry of await readdir(d, { withFileTypes: true })) {
      if (entry.isDirectory()) await prune(join(d, entry.name));
    }
    if (d !== dir && (await readdir(d)).length === 0) await rmdir(d);
  };
  await prune(dir);
}

/**
 * Runs protoc + ts-proto over every file in proto/ and writes the result to
 * outDir, replacing any .ts files generated there before.
 */
export async function generateProto(outDir: string): Promise<void> {
  const target = resolve(outDir);
  if (REPO_ROOT === target || REPO_ROOT.startsWith(target + sep)) {
    throw new Error(`refusing to generate into ${target}: it contains the repository`);
  }
  if (!existsSync(TS_PROTO_PLUGIN)) {
    throw new Error(`ts-proto plugin not found at ${TS_PROTO_PLUGIN}; run npm install`);
  }
  await ensureProtoc();
  const protos = await listProtoFiles();
  if (protos.length === 0) throw new Error(`no .proto files under ${PROTO_DIR}`);

  const staging = await mkdtemp(join(tmpdir(), 'proto-gen-'));
  try {
    try {
      await execFileAsync(
        PYTHON,
        [
          '-m',
          'grpc_tools.protoc',
          `--plugin=protoc-gen-ts_proto=${TS_PROTO_PLUGIN}`,
          `--ts_proto_out=${staging}`,
          `--ts_proto_opt=${TS_PROTO_OPTIONS.join(',')}`,
          `--proto_path=${PROTO_DIR}`,
          `--proto_path=${WELL_KNOWN_PROTO_DIR}`,
          ...protos,
        ],
        { cwd: PROTO_DIR, env: pythonEnv(), maxBuffer: 16 * 1024 * 1024 },
      );
    } catch (err) {
      throw new Error(`protoc failed:\n${errText(err)}`, { cause: err });
    }
    await clearGenerated(target);
    await mkdir(target, { recursive: true });
    await cp(staging, target, { recursive: true });
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

/** True if path exists and is a directory. */
export async function isDir(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
