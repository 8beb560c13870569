// @ts-expect-error a Text module (wrangler.toml [[rules]]), not TypeScript
import greeting from './greeting.html'
import { VERSION } from './version.ts'

export default {
  fetch(request: Request, env: Record<string, string>): Response {
    console.log(JSON.stringify({ msg: 'vars-worker request', path: new URL(request.url).pathname }))
    // Whether workerd was given V8's --expose-gc (the edge's v8Flags).
    if (new URL(request.url).pathname === '/gc') return Response.json({ gc: typeof (globalThis as { gc?: unknown }).gc })
    const cf = (request as Request & { cf?: Record<string, unknown> }).cf
    return Response.json({ FROM_TOML: env.FROM_TOML, OVERRIDDEN: env.OVERRIDDEN, FROM_ENV_FILE: env.FROM_ENV_FILE, greeting, version: VERSION, cfColo: cf?.colo ?? null })
  },
}
