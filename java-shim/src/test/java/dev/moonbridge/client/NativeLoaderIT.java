package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Case C23 on Linux: the native library loads from the jar where launchers put the temporary directory. Each
 * case runs {@link LoaderProbe} in fresh JVMs (a JVM loads a library once).
 */
@Timeout(180)
class NativeLoaderIT {
    static TestPeers peers;
    private final List<Path> cleanup = new ArrayList<Path>();

    @BeforeAll
    static void start() throws Exception {
        peers = TestPeers.start();
    }

    @AfterAll
    static void stop() {
        if (peers != null) {
            peers.close();
        }
    }

    @AfterEach
    void clean() throws Exception {
        for (Path p : cleanup) {
            immutable(p, false);
            ProbeRunner.deleteTree(p);
        }
    }

    private Path freshDir() throws Exception {
        Path d = Files.createTempDirectory("moonbridge-c23");
        cleanup.add(d);
        return d;
    }

    /** The SHA-256 of the jar's library for this platform. */
    private static String jarLibraryHash() throws Exception {
        try (InputStream in = NativeLoader.class.getResourceAsStream(NativeLoader.resourcePath(NativeLoader.platform()))) {
            assertNotNull(in, "the jar holds this platform's library");
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[65536];
            int n;
            while ((n = in.read(buf)) > 0) {
                md.update(buf, 0, n);
            }
            StringBuilder s = new StringBuilder();
            for (byte b : md.digest()) {
                s.append(String.format("%02x", b & 0xff));
            }
            return s.toString();
        }
    }

    private static String sha256(Path f) throws Exception {
        StringBuilder s = new StringBuilder();
        for (byte b : MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(f))) {
            s.append(String.format("%02x", b & 0xff));
        }
        return s.toString();
    }

    @Test
    void aTempDirectoryWithSpacesAndNonAsciiLetters() throws Exception {
        Path tmp = freshDir().resolve("\u00fc dir");
        ProbeRunner.Result r = ProbeRunner.run(60, "--tmpdir", LoaderProbe.escape(tmp.toString()), "--mkdir",
                "--login", peers.wssUrl(), "--ca", peers.ca.toString());
        assertEquals(0, r.exit, r.toString());
        assertTrue(r.loadedFrom().startsWith(tmp.toString() + File.separator), r.toString());
        assertEquals(1, r.lines("login ok").size(), r.toString());
    }

    /**
     * Makes {@code dir} unwritable even for root (tests run as root in CI, and root ignores permission bits):
     * the immutable attribute where it can be set, otherwise mode 555.
     */
    private static void immutable(Path dir, boolean on) throws Exception {
        if (!Files.isDirectory(dir)) {
            return;
        }
        Process p = new ProcessBuilder("chattr", on ? "+i" : "-i", dir.toString()).redirectErrorStream(true).start();
        boolean chattr = p.waitFor() == 0;
        dir.toFile().setWritable(!on, false);
        if (on) {
            assertTrue(chattr || !"root".equals(System.getProperty("user.name")),
                    "as root, the test needs chattr +i to make " + dir + " read-only");
        }
    }

    @Test
    void aReadOnlyTempDirectoryGivesOneClearLineAndVanillaStillWorks() throws Exception {
        Path ro = freshDir().resolve("read-only");
        Files.createDirectories(ro);
        immutable(ro, true);
        cleanup.add(0, ro);
        assertTrue(!ro.resolve("x").toFile().mkdir(), "the directory is really read-only");
        ProbeRunner.Result r = ProbeRunner.run(60, "--tmpdir", ro.toString(), "--home", ro.toString(),
                "--hooks", peers.wssUrl());
        assertEquals(0, r.exit, "no crash: " + r);
        List<String> unavailable = r.lines("MoonBridge: native library unavailable");
        assertEquals(1, unavailable.size(), r.toString());
        assertTrue(unavailable.get(0).contains(ro.toString()), "names the directory: " + r);
        assertEquals(1, r.lines("native available: false").size(), r.toString());
        assertEquals(1, r.lines("vanilla ok").size(), r.toString());
        List<String> mb = r.lines("moonbridge failed: MoonBridge cannot reach " + peers.wssUrl()
                + ": the MoonBridge native library is not available");
        assertEquals(1, mb.size(), r.toString());
    }

    @Test
    void twoGameInstancesLoadingAtOnceShareOneCompleteFile() throws Exception {
        Path tmp = freshDir();
        Process a = ProbeRunner.start("--tmpdir", tmp.toString(), "--login", peers.wssUrl(), "--ca", peers.ca.toString());
        Process b = ProbeRunner.start("--tmpdir", tmp.toString(), "--login", peers.wssUrl(), "--ca", peers.ca.toString());
        ProbeRunner.Result ra = ProbeRunner.finish(a, 90);
        ProbeRunner.Result rb = ProbeRunner.finish(b, 90);
        assertEquals(0, ra.exit, ra.toString());
        assertEquals(0, rb.exit, rb.toString());
        assertEquals(ra.loadedFrom(), rb.loadedFrom());
        assertEquals(1, ra.lines("login ok").size(), ra.toString());
        assertEquals(1, rb.lines("login ok").size(), rb.toString());
        Path lib = new File(ra.loadedFrom()).toPath();
        assertEquals(jarLibraryHash(), sha256(lib), "the loaded file is the jar's library, whole");
        List<String> names;
        try (Stream<Path> s = Files.list(lib.getParent())) {
            names = s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        }
        assertEquals(Arrays.asList(NativeLoader.LOCK_FILE, lib.getFileName().toString()), names,
                "one library and the lock, no partial files");
    }
}
