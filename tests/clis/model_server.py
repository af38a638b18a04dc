#!/usr/bin/env python3
"""A scripted model server on loopback for farm's real-CLI tests.

It speaks, streamed as SSE the way the real APIs stream, well enough for the
CLIs to run against it:
- the Anthropic Messages API (POST /v1/messages): Claude Code;
- the OpenAI Responses API (POST /v1/responses): Codex;
- the Gemini API (POST .../models/M:streamGenerateContent?alt=sse and
  :generateContent): Gemini CLI;
- the OpenAI Chat Completions API (POST /v1/chat/completions): qwen-code.

A task's description carries the script, as a JSON list inside
`<!-- farm-model-script ... -->`. The model's n-th turn in a conversation
plays step n (the count of assistant messages so far):

    {"bash": "COMMAND"}                 call the CLI's shell tool
    {"say": "TEXT"}                     answer and end the turn
    {"fail": 429, "times": N, "retry_after": S}
                                        answer this HTTP error N times first
                                        (then go on with the next step)
    {"stall": S}                        send nothing for S seconds

Requests without a script, or without tools (the CLI's own side requests:
titles, quota probes, Gemini CLI's model router), get a short plain answer. Every request is logged, one JSON line,
to the file named by --log.

Usage: model_server.py --port-file FILE --log FILE
(the port it listens on, on 127.0.0.1, is written to FILE).
"""

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = re.compile(r"<!--\s*farm-model-script\s*(\[.*?\])\s*-->", re.S)
LOCK = threading.Lock()
FAILED = {}  # (script text, step) -> failures answered so far
LOG = None
DUMP = None


def log(entry):
    with LOCK:
        LOG.write(json.dumps(entry) + "\n")
        LOG.flush()


def texts(message):
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                yield part.get("text", "")


def texts_of(item):
    """The text parts of a message in any of the APIs (Messages: text,
    string content; Responses: input_text; Gemini: parts with text)."""
    if isinstance(item.get("parts"), list):
        for part in item["parts"]:
            if isinstance(part, dict) and "text" in part:
                yield part["text"]
        return
    content = item.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                yield part.get("text", "")


def find_script(messages):
    for m in messages:
        if m.get("role") != "user":
            continue
        for t in texts_of(m):
            found = SCRIPT.search(t)
            if found:
                return found.group(1)
    return None


def model_turns(messages):
    """How many turns the model has had in this conversation: Messages'
    assistant messages; Responses' function calls and assistant messages,
    a call and the message beside it counting once per response."""
    n = 0
    for m in messages:
        if m.get("role") == "model":
            n += 1
        elif m.get("role") == "assistant" and m.get("type") in (None, "message"):
            n += 1
        elif m.get("type") == "function_call":
            n += 1
    return n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    openai = False  # this request speaks the Responses API
    gemini = False  # ... the Gemini API
    chat = False  # ... the Chat Completions API
    streaming = False

    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def send_json(self, status, doc, headers=()):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"method": "GET", "path": self.path})
        self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        req = self.body()
        path = self.path.split("?")[0]
        responses = path.endswith("/responses")
        chat = path.endswith("/chat/completions")
        gemini = ":generateContent" in path or ":streamGenerateContent" in path
        if gemini:
            messages = req.get("contents") or []
        else:
            messages = (req.get("input") if responses else req.get("messages")) or []
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        script_text = find_script(messages)
        step = model_turns(messages)
        log({"method": "POST", "path": path, "model": req.get("model"),
             "stream": req.get("stream", False), "scripted": script_text is not None,
             "step": step, "tools": len(req.get("tools") or [])})
        if DUMP:
            with LOCK, open(DUMP, "a") as f:
                f.write(json.dumps({"path": path, "body": req}) + "\n")
        if path.endswith("/count_tokens"):
            return self.send_json(200, {"input_tokens": 100})
        self.gemini = gemini
        self.chat = chat
        self.streaming = ":streamGenerateContent" in path
        if not (path.endswith("/v1/messages") or responses or gemini or chat):
            return self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
        self.openai = responses
        # The CLI's own side requests (Gemini CLI's model router, titles):
        # no tools, so no script; JSON when JSON is asked for.
        side = script_text is None or not req.get("tools")
        if side:
            wants_json = (req.get("generationConfig") or {}).get("responseMimeType") == "application/json"
            # Gemini CLI's model router asks for JSON: what its strategies
            # read (a complexity score, a model choice), so that it routes
            # without an error in the log.
            router = json.dumps({"reasoning": "a scripted task", "model_choice": "flash",
                                 "complexity_reasoning": "a scripted task", "complexity_score": 10})
            return self.reply(req, [("text", router if wants_json else "OK.")], "end_turn")
        steps = json.loads(script_text)
        # Failures at this step are answered first, then the step after them.
        i = 0
        turn = 0
        while i < len(steps):
            s = steps[i]
            if "fail" in s or "stall" in s:
                if turn == step:
                    key = (script_text, i)
                    with LOCK:
                        done = FAILED.get(key, 0)
                        failing = "stall" in s or done < s.get("times", 1)
                        if failing:
                            FAILED[key] = done + 1
                    # Answered outside the lock: a stall must not hold up
                    # the other sessions' requests.
                    if failing:
                        return self.fail(s)
                i += 1
                continue
            if turn == step:
                break
            turn += 1
            i += 1
        if i >= len(steps):
            return self.reply(req, [("text", "Nothing more to do.")], "end_turn")
        s = steps[i]
        if "bash" in s:
            return self.reply(req, [("tool_use", None, s["bash"])], "tool_use")
        return self.reply(req, [("text", s.get("say", "Done."))], "end_turn")

    def reply(self, req, blocks, stop):
        """Answer in the request's API, a shell command in its shell tool."""
        if self.gemini:
            return self.generate(req, blocks)
        if self.chat:
            return self.complete(req, blocks)
        if self.openai:
            return self.respond(req, blocks)
        blocks = [b if b[0] == "text" else ("tool_use", "Bash", {"command": b[2], "description": "scripted"})
                  for b in blocks]
        return self.answer(req, blocks, stop)

    def fail(self, s):
        if "stall" in s:
            time.sleep(s["stall"])
            return self.send_json(500, {"type": "error", "error": {"type": "api_error", "message": "stalled"}})
        status = s["fail"]
        kinds = {429: "rate_limit_error", 529: "overloaded_error", 503: "overloaded_error",
                 401: "authentication_error", 500: "api_error"}
        headers = []
        if "retry_after" in s:
            headers.append(("retry-after", str(s["retry_after"])))
        message = {401: "invalid x-api-key", 429: "Number of requests has exceeded your rate limit"}.get(status, "Overloaded")
        if self.gemini:
            statuses = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED",
                        503: "UNAVAILABLE"}
            return self.send_json(status, {"error": {"code": status, "message": message,
                                                     "status": statuses.get(status, "INTERNAL")}}, headers)
        if self.openai or self.chat:
            codes = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
            return self.send_json(status, {"error": {"message": message, "type": codes.get(status, "server_error"),
                                                     "code": codes.get(status, "server_error"), "param": None}}, headers)
        self.send_json(status, {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": message}}, headers)

    def complete(self, req, blocks):
        """The Chat Completions answer, streamed as chunks when asked."""
        names = [t.get("function", {}).get("name") for t in req.get("tools") or []]
        shell = next((n for n in ("run_shell_command", "bash", "shell", "Bash") if n in names), names[0] if names else "shell")
        cid = "chatcmpl_%d" % int(time.time() * 1e6)
        text = "".join(b[1] for b in blocks if b[0] == "text")
        calls = [{"index": i, "id": "call_%s_%d" % (cid, i), "type": "function",
                  "function": {"name": shell, "arguments": json.dumps({"command": b[2]})}}
                 for i, b in enumerate(b for b in blocks if b[0] != "text")]
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        model = req.get("model", "scripted")
        if not req.get("stream"):
            message = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
            return self.send_json(200, {"id": cid, "object": "chat.completion", "created": int(time.time()),
                                        "model": model, "choices": [{"index": 0, "message": message,
                                                                     "finish_reason": finish}], "usage": usage})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()

        def chunk(delta, finish_reason=None, with_usage=False):
            data = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            if with_usage:
                data["usage"] = usage
            self.wfile.write(("data: %s\n\n" % json.dumps(data)).encode())
            self.wfile.flush()

        if text:
            chunk({"role": "assistant", "content": text})
        if calls:
            chunk({"role": "assistant", "tool_calls": calls})
        chunk({}, finish, True)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def generate(self, req, blocks):
        """The Gemini API's answer: one chunk, streamed as SSE when asked."""
        names = set()
        for t in req.get("tools") or []:
            for f in t.get("functionDeclarations") or []:
                names.add(f.get("name"))
        parts = []
        for b in blocks:
            if b[0] == "text":
                parts.append({"text": b[1]})
            else:
                name = "run_shell_command" if "run_shell_command" in names or not names else sorted(names)[0]
                parts.append({"functionCall": {"name": name, "args": {"command": b[2]}}})
        chunk = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
                 "modelVersion": req.get("model", "gemini-scripted")}
        if not self.streaming:
            return self.send_json(200, chunk)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(("data: %s\r\n\r\n" % json.dumps(chunk)).encode())
        self.wfile.flush()
        self.close_connection = True

    def respond(self, req, blocks):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for name, data in respond_events(req, blocks):
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()
        self.close_connection = True

    def answer(self, req, blocks, stop):
        model = req.get("model", "claude-scripted")
        msg_id = "msg_%d" % int(time.time() * 1e6)
        if not req.get("stream"):
            content = []
            for b in blocks:
                if b[0] == "text":
                    content.append({"type": "text", "text": b[1]})
                else:
                    content.append({"type": "tool_use", "id": "toolu_%s" % msg_id, "name": b[1], "input": b[2]})
            return self.send_json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                        "content": content, "stop_reason": stop, "stop_sequence": None,
                                        "usage": {"input_tokens": 100, "output_tokens": 20}})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()

        def event(name, data):
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()

        event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}})
        for i, b in enumerate(blocks):
            if b[0] == "text":
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": b[1]}})
            else:
                event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": "toolu_%s_%d" % (msg_id, i), "name": b[1], "input": {}}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta", "partial_json": json.dumps(b[2])}})
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": 20}})
        event("message_stop", {"type": "message_stop"})
        self.close_connection = True


def respond_events(req, blocks):
    """The Responses API's stream for `blocks`: (event, data) pairs."""
    rid = "resp_%d" % int(time.time() * 1e6)
    tools = {t.get("name") for t in req.get("tools") or [] if isinstance(t, dict)}
    output = []
    events = [("response.created", {"type": "response.created", "response": {
        "id": rid, "object": "response", "status": "in_progress", "model": req.get("model"), "output": []}})]
    for i, b in enumerate(blocks):
        if b[0] == "text":
            item = {"type": "message", "id": "msg_%s_%d" % (rid, i), "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": b[1], "annotations": []}]}
            events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                          "item": dict(item, status="in_progress", content=[])}))
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                          "output_index": i, "content_index": 0, "delta": b[1]}))
        else:
            if "exec_command" in tools:
                name, args = "exec_command", {"cmd": b[2]}
            else:
                name, args = "shell", {"command": ["bash", "-lc", b[2]]}
            item = {"type": "function_call", "id": "fc_%s_%d" % (rid, i), "call_id": "call_%s_%d" % (rid, i),
                    "name": name, "arguments": json.dumps(args), "status": "completed"}
            events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                          "item": dict(item, status="in_progress", arguments="")}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i, "item": item}))
        output.append(item)
    events.append(("response.completed", {"type": "response.completed", "response": {
        "id": rid, "object": "response", "status": "completed", "model": req.get("model"), "output": output,
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120}}}))
    return events


def main():
    global LOG
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--dump", help="append every request body to this file")
    a = p.parse_args()
    LOG = open(a.log, "a")
    global DUMP
    DUMP = a.dump
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.replace(a.port_file + ".tmp", a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
