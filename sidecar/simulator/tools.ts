/**
 * Tool calling: picks the tool the request forces (if any) and builds
 * plausible JSON arguments from the function's JSON Schema parameters.
 */
import { invalidRequest, type OpenAIError } from './errors.js';

export interface ToolChoice {
  readonly name: string;
  readonly parameters: unknown;
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function functionOf(tool: unknown): { name: string; parameters: unknown } | null {
  if (!isObject(tool) || !isObject(tool.function)) return null;
  const name = tool.function.name;
  return typeof name === 'string' ? { name, parameters: tool.function.parameters } : null;
}

/**
 * The tool to call, null to answer with text, or an error for a request a
 * vendor would refuse. `forced` is the `tool` directive (first tool).
 */
export function chooseTool(tools: unknown, toolChoice: unknown, forced: boolean): ToolChoice | OpenAIError | null {
  const list = Array.isArray(tools) ? tools : [];
  if (isObject(toolChoice)) {
    const wanted = isObject(toolChoice.function) ? toolChoice.function.name : undefined;
    if (typeof wanted !== 'string') return invalidRequest("Missing 'tool_choice.function.name'.", 'tool_choice');
    for (const t of list) {
      const f = functionOf(t);
      if (f?.name === wanted) return f;
    }
    return invalidRequest(`Invalid value for 'tool_choice': function '${wanted}' not found in 'tools'.`, 'tool_choice');
  }
  if (toolChoice === 'required' && list.length === 0) {
    return invalidRequest("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.", 'tool_choice');
  }
  if (toolChoice === 'required' || forced) {
    const first = list.length > 0 ? functionOf(list[0]) : null;
    return first;
  }
  return null; // "auto", "none" or absent: answer with text
}

function stringFor(schema: Record<string, unknown>, name: string): string {
  switch (schema.format) {
    case 'date': return '2024-01-15';
    case 'date-time': return '2024-01-15T12:00:00Z';
    case 'email': return 'user@example.com';
    case 'uri': case 'url': return 'https://example.com';
    case 'uuid': return '00000000-0000-4000-8000-000000000000';
    default: return name ? `sample ${name}` : 'sample';
  }
}

/** A plausible value for a JSON Schema (depth-limited). */
export function sampleValue(schema: unknown, name = '', depth = 0): Json {
  if (!isObject(schema) || depth > 8) return name ? `sample ${name}` : 'sample';
  if ('const' in schema) return schema.const as Json;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0] as Json;
  if ('default' in schema) return schema.default as Json;
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const alts = schema[key];
    if (Array.isArray(alts) && alts.length > 0) return sampleValue(alts.find((a) => !(isObject(a) && a.type === 'null')) ?? alts[0], name, depth + 1);
  }
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? 'null';
  if (type === undefined && isObject(schema.properties)) type = 'object';
  switch (type) {
    case 'string': return stringFor(schema, name);
    case 'integer': return typeof schema.minimum === 'number' ? Math.ceil(schema.minimum) : 1;
    case 'number': return typeof schema.minimum === 'number' ? schema.minimum : 1.5;
    case 'boolean': return true;
    case 'null': return null;
    case 'array': {
      const min = typeof schema.minItems === 'number' ? Math.min(schema.minItems, 8) : 1;
      return Array.from({ length: Math.max(1, min) }, () => sampleValue(schema.items, name, depth + 1));
    }
    case 'object': {
      const out: { [k: string]: Json } = {};
      const props = isObject(schema.properties) ? schema.properties : {};
      const required = Array.isArray(schema.required) ? schema.required : [];
      for (const key of required) {
        if (typeof key === 'string') out[key] = sampleValue(props[key], key, depth + 1);
      }
      return out;
    }
    default: return name ? `sample ${name}` : 'sample';
  }
}

/** JSON arguments string for a function: one plausible value per required property. */
export function argumentsFor(parameters: unknown): string {
  const value = sampleValue(isObject(parameters) ? parameters : { type: 'object' });
  return JSON.stringify(isObject(value) ? value : {});
}

/** Splits arguments into small fragments, the way vendors stream them. */
export function argumentFragments(args: string, size = 8): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i += size) out.push(args.slice(i, i + size));
  return out;
}
