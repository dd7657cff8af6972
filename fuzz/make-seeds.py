#!/usr/bin/env python3
"""Writes fuzz/seeds/<target>/ from the captured CLI data in shared/reference/samples/ and the
AHP shapes VS Code sends (crates/ahp/tests/suite/vscode.rs). Run once; the seeds are committed."""
import json, os, sys

SAMPLES = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/reference/samples"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")

def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def jl(path):
    with open(os.path.join(SAMPLES, path)) as f:
        return [json.loads(l) for l in f if l.strip()]

def dump(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)

# SSE streams: the Anthropic events that --include-partial-messages echoed (real upstream shapes).
inter = jl("control_session_interrupt_2.1.330.jsonl")
events = [m["msg"]["event"] for m in inter if m["dir"] == "<-" and m["msg"].get("type") == "stream_event"]
streams, cur = [], []
for e in events:
    cur.append(e)
    if e.get("type") == "message_stop":
        streams.append(cur); cur = []
if cur:
    streams.append(cur)
def sse(evs, crlf=False):
    nl = "\r\n" if crlf else "\n"
    return "".join(f"event: {e['type']}{nl}data: {dump(e)}{nl}{nl}" for e in evs)
for i, s in enumerate(streams):
    put("sse", f"stream{i}.sse", b"\x03\x07\x01\x10" + sse(s).encode())
    put("relay", f"stream{i}.sse", b"\x00\x05\x0b\x02\x20" + sse(s).encode())
put("sse", "crlf.sse", b"\x02\x01\x05\x00" + sse(streams[0][:3], crlf=True).encode() + b": comment\n\ndata: a\ndata: b\n\n")
head = sse(streams[0][:3]).encode()
put("relay", "cut.sse", b"\x01\x09\x09\x09\x09" + head)
put("relay", "error.sse", b"\x00\x10\x03\x08\x01" + head + b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n')
put("relay", "error-first.sse", b"\x00\x40\x40\x40\x40" + b'event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}\n\n')
put("relay", "done.sse", b"\x00\x02\x02\x02\x02" + b"data: [DONE]\n\n" + sse(streams[0]).encode() + b"data: [DONE]\n\n")

# Proxy requests: the CLI's real Messages requests, as HTTP text.
for ver in ["2.1.330", "2.1.112"]:
    with open(os.path.join(SAMPLES, f"requests_tool_loop_{ver}.json")) as f:
        reqs = json.load(f)
    if isinstance(reqs, dict):
        reqs = reqs.get("requests", [])
    n = 0
    for r in reqs:
        if r.get("method") != "POST":
            continue
        keep = ("anthropic-beta", "anthropic-version", "user-agent", "content-type", "x-claude-code-session-id")
        hdrs = {k.lower(): v for k, v in r.get("headers", {}).items()}
        lines = [f"POST {r['path']}", "Host: 127.0.0.1:8080", "Authorization: Bearer $TOKEN.sess-1"]
        lines += [f"{k}: {hdrs[k]}" for k in keep if k in hdrs]
        lines.append(f"x-fuzz-reply: {n % 6}")
        body = r["body"]
        if n == 0:
            body = dict(body); body["model"] = "claude-sonnet-4-5"
        put("proxy_request", f"cli-{ver}-{n}.http", "\n".join(lines) + "\n\n" + dump(body))
        n += 1
small = {"model": "claude-opus-4-6", "max_tokens": 128000, "stream": True,
         "thinking": {"type": "enabled", "budget_tokens": 200000}, "output_config": {"effort": "max"},
         "messages": [{"role": "user", "content": [{"type": "text", "text": "hi __claude_host_user_prompt__"}]}]}
put("proxy_request", "fit-opus.http", "POST /v1/messages\nHost: localhost:8080\nAuthorization: Bearer $TOKEN.s\nanthropic-beta: context-management-2025-06-27,foo-2025\n\n" + dump(small))
small2 = {"model": "claude-sonnet-4-5", "max_tokens": 64000, "thinking": {"type": "adaptive"},
          "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}],
          "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
put("proxy_request", "fit-sonnet.http", "POST /v1/messages\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\nx-fuzz-reply: 1\n\n" + dump(small2))
put("proxy_request", "quota.http", "POST /v1/messages\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\nx-fuzz-reply: 3\n\n" + dump({"model": "claude-opus-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
put("proxy_request", "count.http", "POST /v1/messages/count_tokens\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\n\n" + dump({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "count me"}], "system": "sys"}))
put("proxy_request", "models.http", "GET /v1/models\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\nx-fuzz-catalog: lenient\n\n")
put("proxy_request", "foreign.http", "POST /v1/messages\nHost: evil.example:8080\nAuthorization: Bearer $TOKEN.s\n\n{}")
put("proxy_request", "noauth.http", "POST /v1/messages\nHost: 127.0.0.1:8080\n\n{\"model\":\"x\",\"messages\":[]}")

# stream-json: -p stdout and the CLI's side of both control sessions.
with open(os.path.join(SAMPLES, "stdout_p_mode_tools_default_2.1.330.jsonl"), "rb") as f:
    put("stream_json", "p-mode.jsonl", b"\x3f\xff\x00" + f.read())
allow = jl("control_session_allow_2.1.330.jsonl")
def side(msgs, d):
    return "".join(dump(m["msg"]) + "\n" for m in msgs if m["dir"] == d)
put("stream_json", "control-allow.jsonl", b"\x07\xff\x02" + side(allow, "<-").encode())
# The interrupted session, first turn only (the file is long), small reads.
lines = [dump(m["msg"]) for m in inter if m["dir"] == "<-"]
cut = next((i for i, l in enumerate(lines) if '"type":"result"' in l), len(lines))
put("stream_json", "partial-interrupted.jsonl", b"\x01\xff\x03" + ("\n".join(lines[:cut + 1]) + "\n").encode())
put("stream_json", "oversize.jsonl", b"\x10\x08\x00" + b'{"type":"keep_alive"}\n' + b'{"type":"system","subtype":"status","pad":"' + b"x" * 80 + b'"}\n{"type":"result","subtype":"success","result":"ok"}')

# Control protocol: every control frame, both directions.
def control(msgs):
    return "".join(dump(m["msg"]) + "\n" for m in msgs if m["dir"] in ("->", "<-") and str(m["msg"].get("type", "")).startswith("control"))
put("control", "allow.jsonl", control(allow))
put("control", "interrupt.jsonl", control(inter))
ask = {"type": "control_request", "request_id": "r9", "request": {"subtype": "can_use_tool", "tool_name": "AskUserQuestion", "tool_use_id": "toolu_q",
       "input": {"questions": [{"question": "Which color?", "header": "Color", "multiSelect": False,
                                 "options": [{"label": "Red", "description": "warm"}, {"label": "Blue"}]},
                                {"question": "Which sizes?", "header": "Size", "multiSelect": True, "options": [{"label": "S"}, {"label": "L"}]}]}}}
put("control", "ask.jsonl", dump(ask) + "\n" + dump({"type": "control_cancel_request", "request_id": "r9"}) + "\n")

# Transcripts: the real one, and its first lines.
with open(os.path.join(SAMPLES, "transcript_2.1.330.jsonl"), "rb") as f:
    t = f.read()
put("transcript", "full.jsonl", t)
put("transcript", "head.jsonl", b"\n".join(t.split(b"\n")[:12]) + b"\n")
put("transcript", "cycle.jsonl", b'{"type":"user","uuid":"a","parentUuid":"b","message":{"role":"user","content":"hi"}}\n{"type":"assistant","uuid":"b","parentUuid":"a","message":{"role":"assistant","content":[{"type":"text","text":"yo"}]}}\nnot json\n')

# AHP: VS Code's start, a turn with attachments, the actions a client dispatches.
def rpc(method, params, id=None):
    m = {"jsonrpc": "2.0", "method": method, "params": params}
    if id is not None:
        m["id"] = id
    return dump(m)
def dispatch(channel, action, seq):
    return rpc("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})
chat = "ahp-session://s1/chat"
sess = "ahp-session://s1"
msg = {"text": "Fix the failing test in #file:foo.ts", "origin": {"kind": "user"},
       "attachments": [{"type": "resource", "uri": "file:///home/me/proj/foo.ts", "label": "foo.ts", "displayKind": "selection",
                        "selection": {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 3, "character": 1}}}},
                       {"type": "simple", "label": "Workspace", "displayKind": "workspace", "modelRepresentation": "TS project"}],
       "model": {"id": "claude-sonnet-4-5", "config": {"thinkingLevel": "high"}}}
start = [
    rpc("initialize", {"channel": "ahp-root://", "protocolVersions": ["0.3.0"], "clientId": "c1",
                       "clientInfo": {"name": "vscode-agents-window", "title": "VS Code Agents Window"},
                       "initialSubscriptions": ["ahp-root://"], "_meta": {"vscode.telemetryLevel": "all"}}, 1),
    dispatch("ahp-root://", {"type": "root/configChanged", "config": {"telemetryLevel": "all"}}, 0),
    dispatch("ahp-root://", {"type": "root/configChanged", "config": {"workspaceTrust": {"enabled": True, "trustedUris": ["file:///home/me/proj"]}}}, 0),
    rpc("setClientManagedSettingsPermissions", {"permissions": {}}),
    rpc("createSession", {"channel": sess, "provider": "claude", "config": {"model": "claude-sonnet-4-5"}}, 2),
    rpc("subscribe", {"channel": chat}, 3),
    rpc("listSessions", {}, 4),
    rpc("ping", {}, "p"),
]
put("ahp", "vscode-start.jsonl", "\n".join(start) + "\n")
turn = [
    dispatch(chat, {"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2026-05-01T10:01:00.000Z", "message": msg}, 1),
    dispatch(chat, {"type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "toolu_1", "approved": True, "confirmed": "user-action", "selectedOptionId": "allow-once"}, 2),
    dispatch(chat, {"type": "chat/pendingMessageSet", "kind": "steering", "id": "st1", "message": {"text": "also update the docs", "origin": {"kind": "user"}}}, 3),
    dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 3150}, 4),
    dispatch(sess, {"type": "session/isReadChanged", "isRead": True}, 5),
    dispatch(sess, {"type": "session/titleChanged", "title": "Fix tests"}, 6),
    dispatch(sess, {"type": "session/configChanged", "config": {"autoApprove": "assisted", "model": "claude-opus-4-6"}}, 7),
    dispatch(chat, {"type": "chat/draftChanged", "draft": {"text": "half a"}}, 8),
    dispatch(chat, {"type": "chat/brandNew", "x": 1}, 9),
]
put("ahp", "turn.jsonl", "\n".join(turn) + "\n")
bad = ['{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', '[1,2]', '{"jsonrpc":"1.0","id":1,"method":"x"}', '{"jsonrpc":"2.0","id":7,"result":{}}',
       '{"jsonrpc":"2.0","id":8,"method":"resourceRead","params":{"uri":"file:///etc/passwd"}}', '{"jsonrpc":"2.0","id":9,"method":"m","params":[1]}', 'nope']
put("ahp", "malformed.jsonl", "\n".join(bad) + "\n")

# OpenAI streams and replies as Copilot sends them (Chat Completions chunks, Responses events)
# and a Claude Code-shaped request, for the translation targets.
def w(path, data):
    put(*path.split("/"), data)
def chunk(delta, finish=None, **extra):
    c = {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1",
         "choices":[{"index":0,"delta":delta,"finish_reason":finish}]}
    c.update(extra)
    return "data: " + json.dumps(c, separators=(",",":")) + "\n\n"
w("openai_stream/chat-text.sse",
  chunk({"role":"assistant","content":""}) + chunk({"content":"Hel"}) + chunk({"content":"lo \"x\"\n"}) +
  chunk({},"stop") + "data: " + json.dumps({"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}) + "\n\ndata: [DONE]\n\n")
w("openai_stream/chat-reasoning-tools.sse",
  chunk({"role":"assistant","reasoning_text":"Plan"}) + chunk({"reasoning_text":" it"}) +
  chunk({"reasoning_opaque":"OPQ","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]}) +
  chunk({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"Glob","arguments":"{\"pat"}}]}) +
  chunk({"tool_calls":[{"index":0,"function":{"arguments":"{\"file_path\":\"/a\"}"}}]}) +
  chunk({"tool_calls":[{"index":1,"function":{"arguments":"tern\":\"*\"}"}}]}) +
  chunk({"reasoning_opaque":"+2"}) +
  chunk({},"tool_calls", usage={"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}) + "data: [DONE]\n\n")
w("openai_stream/chat-error.sse", chunk({"content":"Hi"}) + 'data: {"error":{"message":"Rate limit","code":"rate_limit_exceeded","type":"requests"}}\n\n')
def ev(kind, **data):
    data = {"type": kind, **data}
    return f"event: {kind}\ndata: " + json.dumps(data, separators=(",",":")) + "\n\n"
resp = {"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5.4","output":[]}
w("openai_stream/responses-reasoning-call.sse",
  ev("response.created", sequence_number=0, response=resp) +
  ev("response.output_item.added", sequence_number=1, output_index=0, item={"id":"rs_0","type":"reasoning","summary":[]}) +
  ev("response.reasoning_summary_part.added", sequence_number=2, item_id="rs_0", output_index=0, summary_index=0, part={"type":"summary_text","text":""}) +
  ev("response.reasoning_summary_text.delta", sequence_number=3, item_id="rs_0", output_index=0, summary_index=0, delta="**Plan**") +
  ev("response.reasoning_summary_text.delta", sequence_number=4, item_id="rs_0", output_index=0, summary_index=1, delta="Then run") +
  ev("response.output_item.done", sequence_number=5, output_index=0, item={"id":"rs_0","type":"reasoning","summary":[{"type":"summary_text","text":"**Plan**"}],"encrypted_content":"gAAAA=="}) +
  ev("response.output_item.added", sequence_number=6, output_index=1, item={"id":"msg_1","type":"message","role":"assistant","content":[]}) +
  ev("response.output_text.delta", sequence_number=7, item_id="msg_1", output_index=1, content_index=0, delta="Running.") +
  ev("response.output_item.done", sequence_number=8, output_index=1, item={"id":"msg_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"Running.","annotations":[]}]}) +
  ev("response.output_item.added", sequence_number=9, output_index=2, item={"id":"fc_2","type":"function_call","call_id":"call_1","name":"Bash","arguments":""}) +
  ev("response.function_call_arguments.delta", sequence_number=10, item_id="fc_2", output_index=2, delta="{\"command\":") +
  ev("response.function_call_arguments.delta", sequence_number=11, item_id="fc_2", output_index=2, delta="\"ls\"}") +
  ev("response.function_call_arguments.done", sequence_number=12, item_id="fc_2", output_index=2, arguments="{\"command\":\"ls\"}") +
  ev("response.output_item.done", sequence_number=13, output_index=2, item={"id":"fc_2","type":"function_call","call_id":"call_1","name":"Bash","arguments":"{\"command\":\"ls\"}"}) +
  ev("response.completed", sequence_number=14, response={"id":"resp_1","status":"completed","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":20,"total_tokens":30}}))
w("openai_stream/responses-incomplete-error.sse",
  ev("response.created", sequence_number=0, response=resp) +
  ev("response.output_item.added", sequence_number=1, output_index=0, item={"id":"msg_0","type":"message","role":"assistant","content":[]}) +
  ev("response.refusal.delta", sequence_number=2, item_id="msg_0", output_index=0, content_index=0, delta="No") +
  ev("response.incomplete", sequence_number=3, response={"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"content_filter"}}) +
  ev("error", sequence_number=4, code="server_error", message="boom", param=None))
w("openai_stream/responses-failed.sse", ev("response.failed", sequence_number=0, response={"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded","message":"slow"}}))

png = {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}
cc = {"type":"ephemeral"}
req = {"model":"claude-sonnet-4-5","max_tokens":32000,"stream":True,
  "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.330"},{"type":"text","text":"You are Claude Code.","cache_control":cc}],
  "tools":[{"name":"Bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}},
           {"type":"bash_20250124","name":"bash"}],
  "tool_choice":{"type":"auto","disable_parallel_tool_use":True},
  "thinking":{"type":"enabled","budget_tokens":10000},
  "output_config":{"effort":"high"},
  "metadata":{"user_id":"u"}, "context_management":{"edits":[]},
  "temperature":1, "top_k":5, "stop_sequences":["a","b","c","d","e"],
  "messages":[
    {"role":"user","content":[{"type":"text","text":"look at this","cache_control":cc}, png,
        {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]},
    {"role":"assistant","content":[
        {"type":"thinking","thinking":"plan","signature":"claude-host:responses:gAAAA=="},
        {"type":"thinking","thinking":"plan2","signature":"claude-host:chat:OPQ"},
        {"type":"thinking","thinking":"mine","signature":"EqQBCkYIBxgCKkD"},
        {"type":"text","text":"Running."},
        {"type":"tool_use","id":"call_1","name":"Bash","input":{"command":"ls"}},
        {"type":"tool_use","id":"call_2","name":"Bash","input":{"command":"pwd"}}]},
    {"role":"user","content":[
        {"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"a\nb"}, png]},
        {"type":"tool_result","tool_use_id":"call_2","is_error":True,"content":"no"},
        {"type":"text","text":"<system-reminder>x</system-reminder>"}]},
    {"role":"system","content":"__claude_host_user_prompt__"}]}
w("openai_request/claude-code.json", json.dumps(req, indent=1))
w("openai_request/small.json", json.dumps({"model":"gpt-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"adaptive"}}))
w("openai_request/server-tool.json", json.dumps({"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}))

w("openai_response/chat.json", json.dumps({"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"gpt-4.1",
  "choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Checking.","reasoning_text":"t","reasoning_opaque":"O",
    "tool_calls":[{"id":"call_1","type":"function","function":{"name":"Read","arguments":"{\"file_path\":\"/a\"}"}}]}}],
  "usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":60}}}, indent=1))
w("openai_response/responses.json", json.dumps({"id":"resp_7","object":"response","status":"completed","output":[
  {"type":"reasoning","summary":[{"type":"summary_text","text":"one"}],"encrypted_content":"ENC"},
  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Here.","annotations":[]},{"type":"refusal","refusal":"no"}]},
  {"type":"function_call","call_id":"call_9","name":"Bash","arguments":"not json"}],
  "usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":10},"output_tokens":5}}, indent=1))
w("openai_response/error.json", json.dumps({"error":{"message":"prompt token count of 171234 exceeds the limit of 168000","code":"model_max_prompt_tokens_exceeded"}}))
