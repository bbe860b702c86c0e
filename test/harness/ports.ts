import { createServer, type Server } from 'node:net';

/** Binds `server` to a port the kernel picks on 127.0.0.1 and resolves that port. */
function listenOnAnyPort(server: Server, who: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error(`${who}: could not read the bound port`));
        return;
      }
      resolve(address.port);
    });
  });
}

const closed = (server: Server) => new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));

/**
 * A TCP port that was free a moment ago on 127.0.0.1: binds port 0, reads the
 * port the kernel picked, closes. Another process can still grab it before the
 * caller binds it, so callers that spawn a server should retry on "in use".
 */
export async function freePort(): Promise<number> {
  const server = createServer();
  const port = await listenOnAnyPort(server, 'freePort');
  await closed(server);
  return port;
}

/**
 * A port held open until `release()`: for a server a test starts long after the port
 * went into a configuration (other processes started in between cannot take it, as
 * they could a freePort() port). Connections to it meanwhile are closed at once.
 */
export async function reservePort(): Promise<{ readonly port: number; release(): Promise<void> }> {
  const server = createServer((socket) => socket.destroy());
  const port = await listenOnAnyPort(server, 'reservePort');
  let released: Promise<void> | null = null;
  return { port, release: () => (released ??= closed(server)) };
}
