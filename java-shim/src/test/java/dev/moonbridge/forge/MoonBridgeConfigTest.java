package dev.moonbridge.forge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class MoonBridgeConfigTest {
    @Test
    void defaultsParseCleanly() {
        MoonBridgeConfig c = MoonBridgeConfig.parse(MoonBridgeConfig.defaultText());
        assertEquals(0, c.problems.size(), c.problems.toString());
        assertEquals(0, c.routes.size());
        assertEquals("tick", c.options.get("coalesce"));
        assertEquals("{\"coalesce\":\"tick\",\"tls_versions\":[\"1.2\",\"1.3\"],\"ping_interval_ms\":30000,"
                + "\"connect_timeout_ms\":10000}", c.optionsJson());
        for (String key : MoonBridgeConfig.OPTION_KEYS) {
            assertTrue(MoonBridgeConfig.defaultText().contains(key + " ="), key + " is documented in the defaults");
        }
    }

    @Test
    void routesAndProblems() {
        MoonBridgeConfig c = MoonBridgeConfig.parse("routes {\n"
                + "  play.example.com = wss://play.example.com/mc\n"
                + "  play.example.com:25566 = ws://10.0.0.5:8080/mc\n"
                + "  [2001:db8::1]:25565 = wss://v6.example.com/mc\n"
                + "  bad.example.com = tcp://x:1\n"
                + "  bad:port = wss://x/mc\n"
                + "}\n"
                + "options {\n  tls_versions = 1.2\n  ca_file = /etc/ca.pem\n  colour = blue\n}\n"
                + "stray line\n");
        assertEquals(3, c.routes.size());
        assertEquals(-1, c.routes.get(0).port);
        assertEquals(25566, c.routes.get(1).port);
        assertEquals("2001:db8::1", c.routes.get(2).host);
        assertEquals(4, c.problems.size(), c.problems.toString());
        assertTrue(c.problems.get(0).startsWith("line 5:"), c.problems.get(0));
        assertTrue(c.problems.get(2).contains("unknown option colour"), c.problems.get(2));
        assertEquals("{\"tls_versions\":[\"1.2\"],\"ca_file\":\"/etc/ca.pem\"}", c.optionsJson());
    }

    @Test
    void discoverySection() {
        MoonBridgeConfig c = MoonBridgeConfig.parse(MoonBridgeConfig.defaultText());
        assertTrue(c.discoveryEnabled);
        assertEquals(2000, c.discoveryTimeoutMs);
        c = MoonBridgeConfig.parse("discovery {\n  enabled = false\n  timeout_ms = 500\n}\n");
        assertEquals(0, c.problems.size(), c.problems.toString());
        assertTrue(!c.discoveryEnabled);
        assertEquals(500, c.discoveryTimeoutMs);
        c = MoonBridgeConfig.parse("discovery {\n  enabled = maybe\n  timeout_ms = 0\n  colour = blue\n}\n");
        assertEquals(3, c.problems.size(), c.problems.toString());
        assertTrue(c.discoveryEnabled, "a bad value keeps the default");
        assertEquals(2000, c.discoveryTimeoutMs);
    }
}
