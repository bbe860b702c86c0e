import type { HeaderMap, HeaderValueOption } from '../../generated/envoy/config/core/v3/base.js';
import type { HeaderMutation } from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import type { HeaderEdit } from '../../domain/exchange.js';

/** Header values from ext_proc arrive in raw_value; lower-case keys. */
export function headerMapToRecord(map: HeaderMap | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const h of map?.headers ?? []) {
    const v = h.rawValue && h.rawValue.length ? h.rawValue.toString('utf8') : h.value;
    const prev = out.get(h.key);
    out.set(h.key, prev === undefined ? v : `${prev},${v}`);
  }
  return out;
}

/** ext_proc reads set_headers from raw_value only (never set both value and raw_value). */
export function rawHeader(key: string, value: string): HeaderValueOption {
  return { header: { key, value: '', rawValue: Buffer.from(value, 'utf8') }, append: undefined, appendAction: 0, keepEmptyValue: false };
}

/** ext_authz reads `value` (a string). */
export function plainHeader(key: string, value: string): HeaderValueOption {
  return { header: { key, value, rawValue: Buffer.alloc(0) }, append: undefined, appendAction: 0, keepEmptyValue: false };
}

export function toHeaderMutation(edit: HeaderEdit | undefined): HeaderMutation | undefined {
  if (!edit) return undefined;
  const setHeaders = Object.entries(edit.set).map(([k, v]) => rawHeader(k, v));
  if (!setHeaders.length && !edit.remove.length) return undefined;
  return { setHeaders, removeHeaders: [...edit.remove] };
}
