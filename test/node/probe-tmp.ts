import { startGpuNode } from './gpu-node-process.ts'
import { streamFrames } from './resume-client.ts'
const node = await startGpuNode()
for (let seed = 1; seed < 4; seed++) {
const r = await streamFrames(node.url, '/v1/messages', { model: node.model, messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 24, temperature: 2, top_p: 1, seed, stream: true }, { 'x-zl-resumable': '1' })
console.log(JSON.stringify(r.frames.filter(f=>f.id).map(f => [f.id!.tokens, f.text])))
}
await node.kill()
