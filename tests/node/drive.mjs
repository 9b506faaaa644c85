// Drives pplx_nb's MCP server with the official TypeScript SDK client, as Claude Desktop, Claude
// Code and the MCP Inspector do, and checks every structured result with ajv (JSON Schema
// 2020-12) against the output schema the server declared for the tool.
//
//   node drive.mjs plan.json report.json
//
// plan: {"transport": "stdio", "command", "args", "env", "cwd"}
//    or {"transport": "http", "url", "headers"}
//   plus "calls": [{"name", "arguments", "timeoutMs", "save"}]: a call with "save": "x" keeps
//   its result's conversationId, and "${x}" in a later call's arguments stands for it; a call
//   with "prompt" instead of "name" gets that prompt (prompts/get) with the arguments.
import { readFileSync, writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import Ajv2020 from "ajv/dist/2020.js";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const report = { tools: [], results: [], connectError: null };
const saved = {};

function filled(args) {
  return JSON.parse(JSON.stringify(args ?? {}).replace(/\$\{(\w+)\}/g, (_, name) => saved[name]));
}

function transport() {
  if (plan.transport === "stdio") {
    return new StdioClientTransport({
      command: plan.command,
      args: plan.args,
      env: plan.env,
      cwd: plan.cwd,
      stderr: "ignore",
    });
  }
  return new StreamableHTTPClientTransport(new URL(plan.url), {
    requestInit: { headers: plan.headers ?? {} },
  });
}

function errorOf(err) {
  return { code: err?.code ?? null, message: String(err?.message ?? err) };
}

const client = new Client({ name: "pplx-nb-ts-test", version: "1.0.0" });
const ajv = new Ajv2020({ strict: false, allErrors: true });
try {
  await client.connect(transport());
  const listed = await client.listTools();
  report.tools = listed.tools;
  const schemas = new Map(
    listed.tools.filter((t) => t.outputSchema).map((t) => [t.name, ajv.compile(t.outputSchema)]),
  );
  for (const call of plan.calls) {
    const entry = { name: call.name, result: null, error: null, schemaErrors: null, progress: [] };
    if (call.prompt !== undefined) {
      try {
        entry.result = await client.getPrompt({ name: call.prompt, arguments: call.arguments });
      } catch (err) {
        entry.error = errorOf(err);
      }
      report.results.push(entry);
      continue;
    }
    try {
      entry.result = await client.callTool(
        { name: call.name, arguments: filled(call.arguments) },
        CallToolResultSchema,
        {
          timeout: call.timeoutMs ?? 60000,
          resetTimeoutOnProgress: true,
          onprogress: (p) => entry.progress.push(p.progress),
        },
      );
      const validate = schemas.get(call.name);
      const structured = entry.result.structuredContent;
      if (call.save && structured) saved[call.save] = structured.conversationId;
      if (validate && structured !== undefined && !validate(structured)) {
        entry.schemaErrors = validate.errors;
      }
    } catch (err) {
      entry.error = errorOf(err);
    }
    report.results.push(entry);
  }
} catch (err) {
  report.connectError = errorOf(err);
} finally {
  await client.close().catch(() => {});
}
writeFileSync(process.argv[3], JSON.stringify(report));
process.exit(0);
