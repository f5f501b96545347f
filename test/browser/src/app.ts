// The browser test's page (test/browser_test.go): a SW4RM agent written against the generated
// TypeScript of proto/ and @connectrpc/connect-web, the way a web application would be. It
// registers the agent named by ?agent=, opens its inbound stream and writes every delivered
// message into the DOM, confirming each with AckDelivery. ?format=binary sends protobuf
// instead of JSON. Everything it learns goes into the DOM, where the test reads it:
//
//   #status      registering, registered, streaming, then "error: <code> <message>" if a
//                call fails
//   #keepalives  how many keep-alive items (seq 0, no message) the stream carried
//   #messages    one <li> per delivered message: data-seq, data-message-id, data-type,
//                data-producer and, once AckDelivery answered, data-recorded; its text is the
//                payload as UTF-8
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";

import { CommunicationClass, MessageType } from "../gen/sw4rm/common_pb";
import { RegistryService } from "../gen/sw4rm/registry_pb";
import { RouterService } from "../gen/sw4rm/router_pb";

const params = new URLSearchParams(location.search);
const agentId = params.get("agent") ?? "";
const binary = params.get("format") === "binary";

const el = (id: string) => document.getElementById(id) as HTMLElement;
const setStatus = (s: string) => {
  el("status").textContent = s;
};

// The page is served from the same origin as the API (the test proxies the API's paths to
// the gRPC port), so the transport's base URL is the page's own origin and no CORS applies.
const transport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: binary });
const registry = createClient(RegistryService, transport);
const router = createClient(RouterService, transport);

async function run(): Promise<void> {
  el("format").textContent = binary ? "binary" : "json";
  setStatus("registering");
  const reg = await registry.registerAgent({
    agent: {
      agentId,
      name: "browser",
      description: "an agent in a web page, over Connect",
      capabilities: ["test"],
      communicationClass: CommunicationClass.STANDARD,
      modalitiesSupported: ["application/json", "text/plain"],
    },
  });
  if (!reg.accepted) {
    setStatus(`error: registration refused: ${reg.reason}`);
    return;
  }
  setStatus("registered");

  let keepalives = 0;
  const list = el("messages");
  const stream = router.streamIncoming({ agentId });
  setStatus("streaming");
  for await (const item of stream) {
    // Over Connect the server sends an empty item after a silence, so that proxies do not
    // close an idle response; it is no delivery and is never confirmed.
    if (!item.msg || item.seq === 0n) {
      keepalives++;
      el("keepalives").textContent = String(keepalives);
      continue;
    }
    const msg = item.msg;
    const li = document.createElement("li");
    li.dataset.seq = item.seq.toString();
    li.dataset.messageId = msg.messageId;
    li.dataset.type = MessageType[msg.messageType] ?? String(msg.messageType);
    li.dataset.producer = msg.producerId;
    li.textContent = new TextDecoder().decode(msg.payload);
    list.appendChild(li);
    const ack = await router.ackDelivery({ agentId, seq: item.seq, messageId: msg.messageId });
    li.dataset.recorded = String(ack.recorded);
  }
  setStatus("error: the stream ended");
}

run().catch((err: unknown) => {
  const e = ConnectError.from(err);
  setStatus(`error: ${Code[e.code]} ${e.rawMessage}`);
});
