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
