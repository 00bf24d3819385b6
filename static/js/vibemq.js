/* VibeMQ browser client: the JSON protocol over WebSocket (/ws/vibemq, subprotocol "vibemq").
 *
 *   const mq = new VibeMQ.Client("ws://host/ws/vibemq");
 *   await mq.open(); await mq.connect(token);
 *   await mq.subscribe("orders", (msg) => { ...; mq.ack(msg.id); });
 *   await mq.publish("orders", {any: "json"}, {priority: "high"});
 *
 * Requests get fresh ids and resolve with the reply of the same id; an `error` reply rejects
 * with an Error carrying `code`. Deliveries go to the queue's handler (or `ondeliver`).
 */
(function (global) {
  "use strict";

  class VibeMQError extends Error {
    constructor(frame) {
      super(frame.errorCode + ": " + (frame.errorMessage || ""));
      this.code = frame.errorCode;
      this.frame = frame;
    }
  }

  class Client {
    constructor(url) {
      this.url = url;
      this.ws = null;
      this.pending = new Map();
      this.handlers = new Map();
      this.seq = 0;
      this.ondeliver = null;
      this.onclose = null;
      this.onerror = null;
    }

    nextId() {
      this.seq += 1;
      return "js-" + Date.now().toString(36) + "-" + this.seq;
    }

    open() {
      return new Promise((resolve, reject) => {
        const ws = new WebSocket(this.url, ["vibemq"]);
        this.ws = ws;
        ws.onopen = () => resolve(this);
        ws.onerror = () => reject(new Error("WebSocket error"));
        ws.onmessage = (event) => this._receive(event.data);
        ws.onclose = (event) => {
          for (const { reject: fail } of this.pending.values()) {
            fail(new Error("connection closed (" + event.code + ")"));
          }
          this.pending.clear();
          if (this.onclose) this.onclose(event);
        };
      });
    }

    _receive(text) {
      let frame;
      try {
        frame = JSON.parse(text);
      } catch (e) {
        return;
      }
      if (frame.type === "deliver") {
        const handler = this.handlers.get(frame.queue) || this.ondeliver;
        const headers = frame.headers || {};
        const msg = {
          id: frame.id,
          queue: frame.queue,
          payload: frame.payload,
          headers: headers,
          attempts: Number(headers.deliveryAttempts || 1),
        };
        if (handler) handler(msg);
        return;
      }
      const waiter = this.pending.get(frame.id);
      if (waiter) {
        this.pending.delete(frame.id);
        if (frame.type === "error") waiter.reject(new VibeMQError(frame));
        else waiter.resolve(frame);
      } else if (frame.type === "error" && this.onerror) {
        this.onerror(new VibeMQError(frame));
      }
    }

    send(frame) {
      this.ws.send(JSON.stringify(frame));
    }

    request(frame) {
      frame.id = frame.id || this.nextId();
      return new Promise((resolve, reject) => {
        this.pending.set(frame.id, { resolve, reject });
        this.send(frame);
      });
    }

    connect(token) {
      const headers = { clientVersion: "mqcloud-js/1.0" };
      if (token) headers.authToken = token;
      return this.request({ type: "connect", headers: headers });
    }

    ping() {
      return this.request({ type: "ping" });
    }

    publish(queue, payload, headers) {
      return this.request({ type: "publish", queue: queue, payload: payload, headers: headers || {} });
    }

    subscribe(queue, handler) {
      if (handler) this.handlers.set(queue, handler);
      return this.request({ type: "subscribe", queue: queue });
    }

    unsubscribe(queue) {
      this.handlers.delete(queue);
      return this.request({ type: "unsubscribe", queue: queue });
    }

    ack(messageId) {
      this.send({ id: this.nextId(), type: "ack", headers: { messageId: messageId } });
    }

    createQueue(queue, options) {
      return this.request({ type: "createQueue", queue: queue, headers: options || {} });
    }

    deleteQueue(queue) {
      return this.request({ type: "deleteQueue", queue: queue });
    }

    queueInfo(queue) {
      return this.request({ type: "queueInfo", queue: queue }).then((f) => f.payload);
    }

    listQueues() {
      return this.request({ type: "listQueues" }).then((f) => f.payload);
    }

    close() {
      if (this.ws && this.ws.readyState === WebSocket.OPEN) {
        this.send({ id: this.nextId(), type: "disconnect" });
        this.ws.close(1000);
      }
    }
  }

  function defaultUrl(path) {
    const scheme = global.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + global.location.host + (path || "/ws/vibemq");
  }

  global.VibeMQ = { Client: Client, VibeMQError: VibeMQError, defaultUrl: defaultUrl };
})(window);
