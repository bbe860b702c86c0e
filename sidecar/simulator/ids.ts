import { randomBytes } from 'node:crypto';

/** Per-process random prefix plus a counter: unique and cheap. */
const prefix = randomBytes(6).toString('hex');
let counter = 0;

export function completionId(): string {
  return `chatcmpl-${prefix}${(++counter).toString(36)}`;
}

export function toolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
