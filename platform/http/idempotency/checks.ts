/**
 * Registration-time checks of keyed routes: what the plugin cannot honour is
 * refused at start-up, with an error naming the route, rather than
 * discovered by a client.
 */
import type { RouteOptions } from 'fastify';
import { FST_IDEMPOTENCY_ROUTE_REFUSED } from './errors.js';

/** What the plugin needs to know about a keyed route, computed once. */
export interface KeyedRoute {
  /** `POST /api/v1/accounts (operationId createAccount)`, for messages. */
  readonly label: string;
  /** `schema.operationId`: stored as the key's `action` and used as the metrics label. */
  readonly operationId: string;
  /** `'required'`: a missing key is a 400. */
  readonly required: boolean;
  /** Its 2xx answers carry a one-time secret. */
  readonly oneTimeSecret: boolean;
  /** `Location` template with `{id}`, for 201 answers. */
  readonly location: string | undefined;
  /** 2xx statuses whose response schema declares an ETag header. */
  readonly etagStatuses: ReadonlySet<number>;
}

type Schema = Record<string, unknown>;

const isObject = (v: unknown): v is Schema =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

const JSON_TYPES = /^application\/(?:[\w.+-]+\+)?json$/;

/**
 * A route's label for messages: method, URL and operationId.
 *
 * @param route Fastify's route options.
 * @returns the label.
 */
export function routeLabel(route: Pick<RouteOptions, 'method' | 'url' | 'schema'>): string {
  const methods = Array.isArray(route.method) ? route.method.join(',') : route.method;
  const operationId = isObject(route.schema) ? route.schema['operationId'] : undefined;
  return `${methods} ${route.url} (operationId ${typeof operationId === 'string' ? operationId : 'missing'})`;
}

/** The declared responses with the statuses each covers (`2xx` covers 200 to 299). */
function statusesOf(response: Schema): { status: number; covers: number[]; schema: unknown }[] {
  const out: { status: number; covers: number[]; schema: unknown }[] = [];
  for (const [key, schema] of Object.entries(response)) {
    if (/^[1-5]xx$/i.test(key)) {
      const base = Number(key[0]) * 100;
      out.push({ status: base, covers: Array.from({ length: 100 }, (_, i) => base + i), schema });
    } else if (/^\d{3}$/.test(key)) {
      out.push({ status: Number(key), covers: [Number(key)], schema });
    }
  }
  return out;
}

/** The JSON schema of a response: either itself or its `application/json` content. */
function jsonSchemaOf(schema: unknown): { json: Schema | undefined; foreign: string[] } {
  if (!isObject(schema)) return { json: undefined, foreign: [] };
  const content = schema['content'];
  if (!isObject(content)) return { json: schema, foreign: [] };
  const foreign = Object.keys(content).filter((type) => !JSON_TYPES.test(type));
  const json = Object.entries(content).find(([type]) => JSON_TYPES.test(type))?.[1];
  return { json: isObject(json) && isObject(json['schema']) ? json['schema'] : undefined, foreign };
}

function declaresEtag(schema: unknown): boolean {
  if (!isObject(schema)) return false;
  const headers = schema['headers'];
  if (!isObject(headers)) return false;
  const names = isObject(headers['properties'])
    ? Object.keys(headers['properties'])
    : Object.keys(headers);
  return names.some((n) => n.toLowerCase() === 'etag');
}

function hasRequiredIntegerVersion(schema: Schema | undefined): boolean {
  if (schema === undefined) return false;
  const props = schema['properties'];
  const required = schema['required'];
  if (!isObject(props) || !Array.isArray(required) || !required.includes('version')) return false;
  const version = props['version'];
  return isObject(version) && version['type'] === 'integer';
}

/**
 * Checks a keyed route and derives what the plugin needs from it.
 *
 * @param route Fastify's route options (config.idempotent is true or 'required').
 * @returns the route's keyed metadata.
 * @throws FST_IDEMPOTENCY_ROUTE_REFUSED naming the route: no operationId, a
 *   querystring schema, a non-JSON body, a non-JSON 2xx answer, an ETag
 *   without a required integer `version`, a `location` without a 201 answer.
 */
export function checkKeyedRoute(route: RouteOptions): KeyedRoute {
  const label = routeLabel(route);
  const refuse = (why: string): never => {
    throw new FST_IDEMPOTENCY_ROUTE_REFUSED(label, why);
  };
  const config = route.config ?? {};
  const schema: Schema = isObject(route.schema) ? route.schema : {};
  const operationId = schema['operationId'];
  if (typeof operationId !== 'string' || operationId === '')
    refuse('schema.operationId is required (stored as the action)');
  if (schema['querystring'] !== undefined || schema['query'] !== undefined) {
    refuse(
      'a keyed route may not declare a querystring schema (the fingerprint covers the path only)',
    );
  }
  const body = schema['body'];
  if (isObject(body) && isObject(body['content'])) {
    const foreign = Object.keys(body['content']).filter((type) => !JSON_TYPES.test(type));
    if (foreign.length > 0) refuse(`its body must be JSON, not ${foreign.join(', ')}`);
  }
  const etagStatuses = new Set<number>();
  const response = isObject(schema['response']) ? schema['response'] : {};
  const statuses = statusesOf(response);
  for (const { status, covers, schema: resSchema } of statuses) {
    if (status < 200 || status > 299) continue;
    const { json, foreign } = jsonSchemaOf(resSchema);
    if (foreign.length > 0)
      refuse(`its 2xx answers must be JSON or empty, not ${foreign.join(', ')}`);
    if (declaresEtag(resSchema)) {
      if (!hasRequiredIntegerVersion(json)) {
        refuse(
          `its ${String(status)} answer declares an ETag header, so its schema needs a required integer property "version"`,
        );
      }
      for (const covered of covers) etagStatuses.add(covered);
    }
  }
  const location = config.location;
  if (location !== undefined) {
    if (!statuses.some((s) => s.status === 201))
      refuse('a location template needs a declared 201 answer');
    if (!location.includes('{id}')) refuse('a location template must contain {id}');
  }
  return {
    label,
    operationId: operationId as string,
    required: config.idempotent === 'required',
    oneTimeSecret: config.oneTimeSecret === true,
    location,
    etagStatuses,
  };
}
