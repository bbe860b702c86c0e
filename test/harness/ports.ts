import { createServer } from 'node:net';

/**
 * A TCP port that was free a moment ago on 127.0.0.1: binds port 0, reads the
 * port the kernel picked, closes. Another process can still grab it before the
 * caller binds it, so callers that spawn a server should retry on "in use".
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('freePort: could not read the bound port'));
        return;
      }
      const { port } = address;
      server.close((err) => (err ? reject(err) : resolve(port)));
    });
  });
}

/**
 * A port held open until `release()`: for a server a test starts long after the port
 * went into a configuration (other processes started in between cannot take it, as
 * they could a freePort() port). Connections to it meanwhile are closed at once.
 */
export function reservePort(): Promise<{ readonly port: number; release(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const server = createServer((socket) => socket.destroy());
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('reservePort: could not read the bound port'));
        return;
      }
      let released: Promise<void> | null = null;
      const release = () => (released ??= new Promise<void>((done, fail) => server.close((err) => (err ? fail(err) : done()))));
      resolve({ port: address.port, release });
    });
  });
}
