/**
 * Stored responses, read and deleted by the edge (OpenAI's `GET /v1/responses/{id}`,
 * `GET /v1/responses/{id}/input_items`, `DELETE /v1/responses/{id}`). GPU nodes write them
 * (shared/src/dialects/responses-store.ts); every key is the caller's tenant's, so another
 * tenant's response is simply not there: 404, as for one never stored, expired or deleted.
 */
import type { Context } from 'hono'
import { z } from 'zod'
import { ApiError } from '../../../shared/src/api-error.ts'
import { clipText } from '../../../shared/src/clip-text.ts'
import type { ResponsesStore, StoredResponse } from '../../../shared/src/dialects/responses-store.ts'
import type { AppEnv } from '../context.ts'

const InputItemsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).optional(),
})

const RetrieveQuery = z.object({
  stream: z.enum(['false'], { error: 'a stored response cannot be streamed again (only background responses can, which this server does not run)' }).optional(),
})

export function storedResponseRoutes(store: ResponsesStore | undefined) {
  const load = async (c: Context<AppEnv>): Promise<{ id: string; record: StoredResponse }> => {
    const id = c.req.param('id') ?? ''
    const record = store ? await store.load(c.get('principal').tenant, id) : undefined
    if (!record) throw notFound(id)
    return { id, record }
  }
  return {
    retrieve: async (c: Context<AppEnv>) => {
      query(RetrieveQuery, c)
      return c.json((await load(c)).record.response)
    },
    inputItems: async (c: Context<AppEnv>) => {
      const q = query(InputItemsQuery, c)
      const { record } = await load(c)
      const items = q.order === 'asc' ? record.input : [...record.input].reverse()
      const from = q.after === undefined ? 0 : items.findIndex((item) => item.id === q.after) + 1
      if (from === 0 && q.after !== undefined) throw new ApiError('invalid_request', `'after' names no item of this response: '${clipText(q.after)}'.`, { param: 'after' })
      const data = items.slice(from, from + q.limit)
      return c.json({ object: 'list', data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: from + q.limit < items.length })
    },
    remove: async (c: Context<AppEnv>) => {
      const id = c.req.param('id') ?? ''
      if (!store || !(await store.delete(c.get('principal').tenant, id))) throw notFound(id)
      return c.json({ id, object: 'response', deleted: true })
    },
  }
}

function notFound(id: string): ApiError {
  return new ApiError('not_found', `Response with id '${clipText(id)}' not found.`)
}

function query<T extends z.ZodType>(schema: T, c: Context<AppEnv>): z.output<T> {
  const parsed = schema.safeParse(c.req.query())
  if (parsed.success) return parsed.data
  const issue = parsed.error.issues[0]!
  const param = String(issue.path[0] ?? '')
  throw new ApiError('invalid_request', `'${param}': ${issue.message}`, { param })
}
