import { describe, expect, it } from 'vitest'
import { API_SAMPLING_DEFAULTS, resolveSampling } from './generation.ts'

describe('resolveSampling', () => {
  it("takes each field from the request, else the model's defaults, else the API's", () => {
    expect(resolveSampling({})).toEqual(API_SAMPLING_DEFAULTS)
    expect(resolveSampling({ topP: 0.5 }, { temperature: 0.6, topP: 0.9, topK: 20 })).toEqual({ ...API_SAMPLING_DEFAULTS, temperature: 0.6, topP: 0.5, topK: 20 })
    expect(resolveSampling({ temperature: 0, seed: 3 }, { temperature: 0.6 })).toEqual({ ...API_SAMPLING_DEFAULTS, temperature: 0, seed: 3 })
  })
})
