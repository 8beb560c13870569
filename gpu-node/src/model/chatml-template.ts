/**
 * ChatML with tools the way Qwen2.5's template renders them (Hermes-style calls): the node's
 * template for a model directory that ships none, and the one the generated presets carry. Plain
 * conversations render as classic ChatML; with `tools`, the system turn lists their signatures
 * in <tools></tools> and asks for calls in <tool_call></tool_call> tags; an assistant turn's
 * calls are written back in that form and `tool` turns are grouped into one user turn of
 * <tool_response> blocks. Content may be a string or OpenAI-style text parts.
 */
export const CHATML_TOOLS_TEMPLATE = [
  "{%- macro text(content) %}{%- if content is string %}{{- content }}{%- elif content %}{%- for part in content %}{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}{%- endfor %}{%- endif %}{%- endmacro %}",
  "{%- if tools %}",
  "{{- '<|im_start|>system\\n' }}",
  "{%- if messages[0]['role'] == 'system' %}{{- text(messages[0]['content']) + '\\n\\n' }}{%- endif %}",
  "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}",
  "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}",
  "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}",
  "{%- elif messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + text(messages[0]['content']) + '<|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- for message in messages %}",
  "{%- if message['role'] == 'system' and loop.first %}",
  "{%- elif message['role'] == 'tool' %}",
  "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}",
  "{{- '\\n<tool_response>\\n' + text(message['content']) + '\\n</tool_response>' }}",
  "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}",
  "{%- else %}",
  "{{- '<|im_start|>' + message['role'] + '\\n' + text(message['content']) }}",
  "{%- if message['role'] == 'assistant' and message['tool_calls'] %}",
  "{%- for call in message['tool_calls'] %}",
  "{%- if not loop.first or message['content'] %}{{- '\\n' }}{%- endif %}",
  "{{- '<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' + (call['function']['arguments'] | tojson) + '}\\n</tool_call>' }}",
  "{%- endfor %}",
  "{%- endif %}",
  "{{- '<|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- endfor %}",
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
].join('')
