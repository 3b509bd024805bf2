"""The Responses API (POST /v1/responses) with the official `openai` client against
`llmbus serve` and the default model:

- client.responses.create with a string input and instructions: one completed message item
  whose output_text is what the same conversation gives on /v1/chat/completions (seeded),
  usage counting the same tokens;
- a message list input (system / developer / user / assistant, input_text parts) gives the
  chat answer of the same messages;
- max_output_tokens cuts: status incomplete, incomplete_details.reason max_output_tokens;
- streamed: response.created, response.in_progress, output_item.added, content_part.added,
  output_text.delta (adding up to the text), output_text.done, content_part.done,
  output_item.done, response.completed, sequence numbers in order; the stream helper
  (client.responses.stream) assembles the same response;
- text.format json_schema: output_text validates (and client.responses.parse gives the
  pydantic object); json_object parses;
- function tools: tool_choice required gives function_call items whose arguments validate
  against the tool's parameters; a function_call_output item fed back is read;
- store true, previous_response_id, non-function tools, chat-only fields are 400s naming
  the field; store false is accepted.
"""
import json
import sys

from api_stack import Stack, run_cases, skip

try:
    import jsonschema
    import openai
    import pydantic
except ImportError as e:
    skip(f"{e.name} is missing (make venv)")

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                          "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}


def main():
    with Stack(args=["--enable-auto-tool-choice"]) as st:  # tool_choice auto, as vllm serve needs it
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        name = st.model_name
        extra = {"seed": 11}

        def chat_text(messages, max_tokens, **kw):
            r = client.chat.completions.create(model=name, messages=messages, max_tokens=max_tokens, temperature=1,
                                               seed=11, **kw)
            return r.choices[0].message.content, r.usage

        def text_input_and_instructions_match_chat():
            r = client.responses.create(model=name, input="Name a color.", instructions="Answer in one word.",
                                        max_output_tokens=24, temperature=1, extra_body=extra)
            assert r.object == "response" and r.id.startswith("resp_"), r
            assert r.status in ("completed", "incomplete"), r.status
            assert [o.type for o in r.output] == ["message"], r.output
            want, usage = chat_text([{"role": "system", "content": "Answer in one word."},
                                     {"role": "user", "content": "Name a color."}], 24)
            assert r.output_text == want, (r.output_text, want)
            assert r.usage.input_tokens == usage.prompt_tokens and r.usage.output_tokens == usage.completion_tokens, r.usage
            assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
            assert r.instructions == "Answer in one word." and r.max_output_tokens == 24

        def message_list_input_matches_chat():
            items = [{"role": "developer", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "input_text", "text": "Hi! Who are you?"}]},
                     {"role": "assistant", "content": [{"type": "output_text", "text": "A model."}]},
                     {"type": "message", "role": "user", "content": "Say more."}]
            r = client.responses.create(model=name, input=items, max_output_tokens=20, temperature=1, extra_body=extra)
            want, _ = chat_text([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi! Who are you?"},
                                 {"role": "assistant", "content": "A model."},
                                 {"role": "user", "content": "Say more."}], 20)
            assert r.output_text == want, (r.output_text, want)

        def max_output_tokens_makes_it_incomplete():
            r = client.responses.create(model=name, input="Tell me a long story.", max_output_tokens=5,
                                        temperature=1, extra_body={"seed": 3, "ignore_eos": True})
            assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
            assert r.usage.output_tokens == 5

        def streamed_events_add_up():
            ask = {"model": name, "input": "Name a fruit.", "max_output_tokens": 48, "temperature": 0}
            events = list(client.responses.create(stream=True, **ask))
            types = [e.type for e in events]
            assert types[:2] == ["response.created", "response.in_progress"], types
            assert types[-1] == "response.completed", types
            for t in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
                      "response.content_part.done", "response.output_item.done"):
                assert types.count(t) == 1, (t, types)
            assert [e.sequence_number for e in events] == list(range(len(events)))
            deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            done = next(e for e in events if e.type == "response.output_text.done")
            final = events[-1].response
            assert deltas and deltas == done.text == final.output_text, (deltas, done.text, final.output_text)
            assert client.responses.create(**ask).output_text == final.output_text
            with client.responses.stream(**ask) as s:  # the SDK's helper assembles the events itself
                helper = s.get_final_response()
            assert helper.output_text == final.output_text

        def json_schema_output_validates():
            completed = 0
            for seed in (1, 2, 3):
                r = client.responses.create(model=name, input="Describe a person as JSON.", max_output_tokens=64,
                                            temperature=1, extra_body={"seed": seed},
                                            text={"format": {"type": "json_schema", "name": "person", "schema": SCHEMA,
                                                             "strict": True}})
                if r.status == "completed":
                    jsonschema.validate(json.loads(r.output_text), SCHEMA)
                    completed += 1
            # the schema bounds the object (a name of <= 16 characters, an age): 64 tokens end it
            assert completed >= 2, f"{completed} of 3 json_schema responses completed within 64 tokens"

            class Person(pydantic.BaseModel):
                name: str
                age: int

            p = client.responses.parse(model=name, input="Describe a person.", max_output_tokens=64, temperature=1,
                                       text_format=Person, extra_body={"seed": 5})
            if p.status == "completed":
                assert isinstance(p.output_parsed, Person), p.output_parsed
            r = client.responses.create(model=name, input="Any JSON object.", max_output_tokens=48, temperature=1,
                                        text={"format": {"type": "json_object"}}, extra_body={"seed": 4})
            if r.status == "completed":
                assert isinstance(json.loads(r.output_text), dict)

        def function_tools_give_function_calls():
            r = client.responses.create(model=name, input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
                                        parallel_tool_calls=False, max_output_tokens=64, temperature=1,
                                        extra_body={"seed": 2})
            calls = [o for o in r.output if o.type == "function_call"]
            assert calls and r.status == "completed", r.output
            for c in calls:
                assert c.name == "get_weather" and c.call_id, c
                jsonschema.validate(json.loads(c.arguments), WEATHER["parameters"])
            follow = [{"role": "user", "content": "Weather in Paris?"},
                      {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                       "arguments": calls[0].arguments},
                      {"type": "function_call_output", "call_id": calls[0].call_id, "output": "22 C, sunny"}]
            r2 = client.responses.create(model=name, input=follow, tools=[WEATHER], max_output_tokens=24,
                                         temperature=1, extra_body={"seed": 2})
            assert r2.output and r2.status in ("completed", "incomplete"), r2
            streamed = list(client.responses.create(model=name, input="Weather in Paris?", tools=[WEATHER],
                                                    tool_choice="required", parallel_tool_calls=False,
                                                    max_output_tokens=64, temperature=1, stream=True,
                                                    extra_body={"seed": 2}))
            args = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
            assert args == calls[0].arguments and streamed[-1].response.output[0].name == "get_weather", streamed[-1]

        def refusals_name_the_field():
            for kw, field in [({"store": True}, "store"), ({"previous_response_id": "resp_x"}, "previous_response_id"),
                              ({"tools": [{"type": "web_search"}]}, "tools[0]"),
                              ({"extra_body": {"messages": []}}, "messages"),
                              ({"text": {"format": {"type": "yaml"}}}, "text.format.type")]:
                try:
                    client.responses.create(model=name, input="x", max_output_tokens=4, **kw)
                except openai.BadRequestError as e:
                    err = e.body if isinstance(e.body, dict) else {}
                    err = err.get("error", err)
                    assert str(err.get("param")) == field, (kw, err)
                    continue
                raise AssertionError(f"no 400 for {kw}")
            r = client.responses.create(model=name, input="Hi", max_output_tokens=4, store=False)
            assert r.store is False and r.output

        failures = run_cases([
            ("text_input_and_instructions_match_chat", text_input_and_instructions_match_chat),
            ("message_list_input_matches_chat", message_list_input_matches_chat),
            ("max_output_tokens_makes_it_incomplete", max_output_tokens_makes_it_incomplete),
            ("streamed_events_add_up", streamed_events_add_up),
            ("json_schema_output_validates", json_schema_output_validates),
            ("function_tools_give_function_calls", function_tools_give_function_calls),
            ("refusals_name_the_field", refusals_name_the_field),
        ])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
