// Drives pplx_nb's MCP server with the official TypeScript SDK client, as Claude Desktop, Claude
// Code and the MCP Inspector do, and checks every structured result with ajv (JSON Schema
// 2020-12) against the output schema the server declared for the tool.
//
//   node drive.mjs plan.json report.json
//
// plan: {"transport": "stdio", "command", "args", "env", "cwd"}
//    or {"transport": "http", "url", "headers"}
//   plus "calls": [{"name", "arguments", "timeoutMs", "save", "saveLink"}]: a call with "save":
//   "x" keeps its result's conversationId, "saveLink": "y" the URI of its first resource_link,
//   and "${x}" in a later call's arguments stands for it; a call with "prompt" instead of "name"
//   gets that prompt (prompts/get) with the arguments; one with "request" (resources/list,
//   resources/templates/list, resources/read, completion/complete) sends that request with
//   "params". The report counts the notifications/resources/list_changed received ("listChanged")
//   and each entry how many had come when its result did.
import { readFileSync, writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  ResourceListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import Ajv2020 from "ajv/dist/2020.js";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const report = { tools: [], results: [], connectError: null, listChanged: 0, capabilities: null };
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
client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
  report.listChanged += 1;
});
const requests = {
  "resources/list": (params) => client.listResources(params),
  "resources/templates/list": (params) => client.listResourceTemplates(params),
  "resources/read": (params) => client.readResource(params),
  "completion/complete": (params) => client.complete(params),
};
try {
  await client.connect(transport());
  report.capabilities = client.getServerCapabilities() ?? null;
  const listed = await client.listTools();
  report.tools = listed.tools;
  const schemas = new Map(
    listed.tools.filter((t) => t.outputSchema).map((t) => [t.name, ajv.compile(t.outputSchema)]),
  );
  for (const call of plan.calls) {
    const entry = { name: call.name, result: null, error: null, schemaErrors: null, progress: [] };
    if (call.request !== undefined) {
      try {
        entry.result = await requests[call.request](filled(call.params));
      } catch (err) {
        entry.error = errorOf(err);
      }
      entry.listChanged = report.listChanged;
      report.results.push(entry);
      continue;
    }
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
      const link = entry.result.content.find((block) => block.type === "resource_link");
      if (call.saveLink && link) saved[call.saveLink] = link.uri;
      if (validate && structured !== undefined && !validate(structured)) {
        entry.schemaErrors = validate.errors;
      }
    } catch (err) {
      entry.error = errorOf(err);
    }
    entry.listChanged = report.listChanged;
    report.results.push(entry);
  }
} catch (err) {
  report.connectError = errorOf(err);
} finally {
  await client.close().catch(() => {});
}
writeFileSync(process.argv[3], JSON.stringify(report));
process.exit(0);
