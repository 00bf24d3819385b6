import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.zbus.client.Broker;
import org.zbus.client.Consumer;
import org.zbus.client.Producer;
import org.zbus.client.ZbusException;
import org.zbus.client.broker.SingleBroker;
import org.zbus.client.broker.SingleBrokerConfig;
import org.zbus.client.service.Caller;
import org.zbus.client.service.Service;
import org.zbus.client.service.ServiceConfig;
import org.zbus.common.MessageMode;
import org.zbus.remoting.Message;

/**
 * The 2015 zbus Java client (zbus-5.1.0-SNAPSHOT.jar) against an mqcloud zbus server, with no
 * token at all, using only the jar's client API. Run by tests/zbus/test_java_client_2015.py:
 *
 * <pre>java -cp JAR:DIR ZbusClient2015 HOST:PORT QUEUE_MQ SERVICE_MQ PUBSUB_MQ CLOSED_MQ BODIES</pre>
 *
 * The first three MQs do not exist yet: the client creates them (Consumer.recv answers a 404
 * with Consumer.createMQ, the admin create_mq). CLOSED_MQ is a catalog topic not open to
 * token-less clients. BODIES is a file of the bodies to produce, one hex line each. Results go
 * to stdout, one per line: {@code ZB <key> <field=value>...}, byte bodies in hex; the test
 * asserts on them. Every wait is bounded.
 */
public final class ZbusClient2015 {
    private static final long STEP_MS = 15_000;
    private static final AtomicInteger connectRaces = new AtomicInteger();

    public static void main(String[] args) throws Exception {
        String address = args[0];
        List<byte[]> bodies = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[5]), StandardCharsets.US_ASCII)) {
            if (!line.isEmpty()) {
                bodies.add(unhex(line));
            }
        }
        SingleBrokerConfig config = new SingleBrokerConfig();
        config.setBrokerAddress(address);
        Broker broker = new SingleBroker(config);
        int code = 0;
        try {
            queue(broker, args[1], bodies);
            rpc(broker, args[2]);
            pubsub(broker, args[3]);
            closed(broker, args[4]);
            out("client.connect_races", "count=" + connectRaces.get());
            out("done");
        } catch (Throwable e) {
            e.printStackTrace();
            out("failed", "error=" + word(e.toString()));
            code = 1;
        } finally {
            broker.destroy();
        }
        System.exit(code); // the client's dispatcher and worker threads never end by themselves
    }

    /** Produce the bodies to a queue MQ the consumer creates, then consume them back. */
    static void queue(Broker broker, String mq, List<byte[]> bodies) throws Exception {
        List<Message> got = Collections.synchronizedList(new ArrayList<>());
        AtomicReference<Message> after = new AtomicReference<>();
        Thread consumer = new Thread(() -> {
            Consumer c = new Consumer(broker, mq, MessageMode.MQ);
            long deadline = System.currentTimeMillis() + STEP_MS;
            try {
                // The first recv gets 404, sends create_mq, then parks its consume.
                while (got.size() < bodies.size() && System.currentTimeMillis() < deadline) {
                    Message m = c.recv(5_000);
                    if (m != null) {
                        got.add(m);
                    }
                }
                // One more consume settles the last delivery and shows nothing else is queued.
                after.set(c.recv(500));
            } catch (Exception e) {
                e.printStackTrace();
            }
        }, "queue-consumer");
        consumer.setDaemon(true);
        consumer.start();

        Producer producer = new Producer(broker, mq);
        int notFound = 0;
        for (int i = 0; i < bodies.size(); i++) {
            Message ack = null;
            long deadline = System.currentTimeMillis() + STEP_MS;
            while (System.currentTimeMillis() < deadline) {
                Message m = new Message();
                m.setHead("x-seq", Integer.toString(i));
                m.setBody(bodies.get(i));
                ack = send(producer, m);
                if (ack == null || !ack.isStatus404()) {
                    break;
                }
                notFound++; // not created yet: the client created no MQ for the producer
                Thread.sleep(50);
            }
            out("queue.ack", "seq=" + i, "status=" + status(ack), "body=" + text(ack));
        }
        out("queue.not_found_before_create", "count=" + notFound);
        consumer.join(STEP_MS + 2_000);
        synchronized (got) {
            for (Message m : got) {
                out("queue.recv", "status=" + m.getStatus(), "seq=" + word(m.getHead("x-seq")),
                        "msgid=" + word(m.getMsgId()), "msgid_raw=" + word(m.getMsgIdRaw()),
                        "redelivered=" + word(m.getHead("redelivered")), "body=" + hex(m.getBody()));
            }
        }
        Message extra = after.get();
        out("queue.after", "status=" + status(extra), "body=" + hex(extra == null ? null : extra.getBody()));
    }

    /** One request/reply through a service MQ the 2015 Service worker creates. */
    static void rpc(Broker broker, String mq) throws Exception {
        AtomicReference<Message> seen = new AtomicReference<>();
        ServiceConfig config = new ServiceConfig();
        config.setBroker(broker);
        config.setMq(mq);
        config.setThreadCount(1);
        config.setReadTimeout(5_000);
        config.setServiceHandler(request -> {
            seen.set(request);
            Message reply = new Message();
            reply.setStatus("200");
            reply.setBody(concat("echo:".getBytes(StandardCharsets.UTF_8), request.getBody()));
            return reply;
        });
        Service service = new Service(config);
        service.setDaemon(true); // its worker threads inherit it
        service.start();

        Caller caller = new Caller(broker, mq);
        Message reply = null;
        int notFound = 0;
        long deadline = System.currentTimeMillis() + STEP_MS;
        while (System.currentTimeMillis() < deadline) {
            Message request = new Message();
            request.setBody("ping-\u00e9\u4e2d".getBytes(StandardCharsets.UTF_8));
            reply = call(caller, request, 5_000);
            if (reply == null || !reply.isStatus404()) {
                break;
            }
            notFound++; // the worker has not created the service MQ yet
            Thread.sleep(50);
        }
        Message request = seen.get();
        if (request != null) {
            out("rpc.worker", "ack=" + word(request.getHead("ack")),
                    "msgid_raw=" + word(request.getMsgIdRaw()),
                    "mq_reply_set=" + (request.getMqReply() != null && !request.getMqReply().isEmpty()),
                    "body=" + hex(request.getBody()));
        }
        out("rpc.reply", "status=" + status(reply), "not_found_before_create=" + notFound,
                "body=" + hex(reply == null ? null : reply.getBody()));
    }

    /** A pub/sub MQ the subscriber creates: topic filtering and order. */
    static void pubsub(Broker broker, String mq) throws Exception {
        List<Message> got = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch subscribed = new CountDownLatch(1);
        Thread subscriber = new Thread(() -> {
            Consumer c = new Consumer(broker, mq, MessageMode.PubSub);
            c.setTopic("sports");
            long deadline = System.currentTimeMillis() + STEP_MS;
            try {
                while (got.size() < 3 && System.currentTimeMillis() < deadline) {
                    Message m = c.recv(5_000);
                    if (m == null) {
                        continue;
                    }
                    if ("probe".equals(new String(m.getBody(), StandardCharsets.UTF_8))) {
                        subscribed.countDown(); // published before the real ones: skipped
                    } else {
                        got.add(m);
                    }
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
        }, "subscriber");
        subscriber.setDaemon(true);
        subscriber.start();

        // Messages matching no subscriber are dropped: probe until the subscription is live.
        Producer publisher = new Producer(broker, mq);
        long deadline = System.currentTimeMillis() + STEP_MS;
        int probes = 0;
        while (System.currentTimeMillis() < deadline) {
            Message probe = new Message();
            probe.setTopic("sports");
            probe.setBody("probe".getBytes(StandardCharsets.UTF_8));
            send(publisher, probe);
            probes++;
            if (subscribed.await(200, TimeUnit.MILLISECONDS)) {
                break;
            }
        }
        out("pubsub.subscribed", "ok=" + (subscribed.getCount() == 0), "probes=" + probes);
        String[][] published = {{"weather", "rain"}, {"sports", "s1"}, {"sports", "s2"}, {"sports", "s3"}};
        for (String[] p : published) {
            Message m = new Message();
            m.setTopic(p[0]);
            m.setBody(p[1].getBytes(StandardCharsets.UTF_8));
            Message ack = send(publisher, m);
            out("pubsub.ack", "topic=" + p[0], "status=" + status(ack));
        }
        subscriber.join(STEP_MS + 2_000);
        synchronized (got) {
            for (Message m : got) {
                out("pubsub.recv", "status=" + m.getStatus(), "topic=" + word(m.getTopic()),
                        "body=" + hex(m.getBody()));
            }
        }
    }

    /** A topic closed to token-less clients: produce and consume are refused. */
    static void closed(Broker broker, String mq) throws Exception {
        Producer producer = new Producer(broker, mq);
        Message m = new Message();
        m.setBody("must-not-be-stored".getBytes(StandardCharsets.UTF_8));
        Message ack = send(producer, m);
        out("closed.produce", "status=" + status(ack), "body=" + text(ack));

        AtomicReference<Message> got = new AtomicReference<>();
        Thread consumer = new Thread(() -> {
            try {
                Consumer c = new Consumer(broker, mq, MessageMode.MQ);
                // recv also answers null after the connect race (see isConnectRace): try again
                for (int attempt = 0; attempt < 3 && got.get() == null; attempt++) {
                    got.set(c.recv(2_000));
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
        }, "closed-consumer");
        consumer.setDaemon(true); // a 404 would make recv create_mq and retry forever
        consumer.start();
        consumer.join(10_000);
        Message reply = got.get();
        out("closed.consume", "status=" + status(reply), "body=" + text(reply));
    }

    /** Producer.send is asynchronous: wait (bounded) for its ack; null on timeout. */
    static Message send(Producer producer, Message m) throws Exception {
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<Message> result = new AtomicReference<>();
        for (int attempt = 1; ; attempt++) {
            try {
                producer.send(m, reply -> {
                    result.set(reply);
                    done.countDown();
                });
                break;
            } catch (ZbusException e) {
                if (attempt == 5 || !isConnectRace(e.getCause())) {
                    throw e;
                }
                connectRaces.incrementAndGet();
                Thread.sleep(20);
            }
        }
        done.await(5_000, TimeUnit.MILLISECONDS);
        return result.get();
    }

    /** Caller.invokeSync, retried (bounded) over the client's connect race. */
    static Message call(Caller caller, Message m, int timeout) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                return caller.invokeSync(m, timeout);
            } catch (IOException e) {
                if (attempt == 5 || !isConnectRace(e)) {
                    throw e;
                }
                connectRaces.incrementAndGet();
                Thread.sleep(20);
            }
        }
    }

    /**
     * The 2015 client's own race, not the server's doing: its NIO dispatcher counts down the
     * connect latch before it marks the session CONNECTED, so a thread waiting in
     * RemotingClient.connectIfNeed can wake too early and throw "Connection failed" on a
     * connection that is in fact up. Consumer.recv swallows it (reconnects, returns null);
     * Producer.send and Caller.invokeSync throw it, so a bounded retry covers it here.
     */
    static boolean isConnectRace(Throwable e) {
        return e instanceof IOException && "Connection failed".equals(e.getMessage());
    }

    static void out(String key, String... fields) {
        StringBuilder line = new StringBuilder("ZB ").append(key);
        for (String f : fields) {
            line.append(' ').append(f);
        }
        System.out.println(line);
        System.out.flush();
    }

    static String status(Message m) {
        return m == null ? "none" : word(m.getStatus());
    }

    static String text(Message m) {
        return m == null || m.getBody() == null ? "-" : hex(m.getBody());
    }

    /** A value with no spaces ("-" for null or empty). */
    static String word(String s) {
        return s == null || s.isEmpty() ? "-" : s.replaceAll("\\s", "_");
    }

    static String hex(byte[] b) {
        if (b == null) {
            return "-";
        }
        StringBuilder s = new StringBuilder();
        for (byte x : b) {
            s.append(String.format("%02x", x & 0xff));
        }
        return s.length() == 0 ? "-" : s.toString();
    }

    static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] c = new byte[a.length + (b == null ? 0 : b.length)];
        System.arraycopy(a, 0, c, 0, a.length);
        if (b != null) {
            System.arraycopy(b, 0, c, a.length, b.length);
        }
        return c;
    }
}
