package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.jar.JarFile;
import java.util.zip.ZipEntry;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * The release jar ({@code java-shim/build.sh release}, which sets {@code moonbridge.release=true}) carries a
 * native library for each of the five platforms, as the players' game loads it: each a library of its
 * platform's format and CPU, and {@code natives/platforms.txt} naming exactly those five. The build itself checks
 * exports and imports (tests/examples/inspect_natives.rs); this test reads the jar the players get, so a library
 * lost between staging and packing fails here.
 */
class ReleaseJarIT {
    static final List<String> PLATFORMS =
            Arrays.asList("linux-aarch64", "linux-x86_64", "macos-aarch64", "macos-x86_64", "windows-x86_64");

    @Test
    void theReleaseJarCarriesALibraryForEveryPlatform() throws Exception {
        Assumptions.assumeTrue("true".equals(System.getProperty("moonbridge.release")),
                "not a release build (java-shim/build.sh release)");
        File jar = null;
        for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (entry.endsWith(".jar") && new File(entry).getName().startsWith("moonbridge-forge-")) {
                jar = new File(entry);
            }
        }
        assertNotNull(jar, "the mod jar on the class path: " + System.getProperty("java.class.path"));
        StringBuilder listed = new StringBuilder();
        try (JarFile j = new JarFile(jar)) {
            for (String p : PLATFORMS) {
                String entry = NativeLoader.resourcePath(p).substring(1);
                byte[] head = head(j, entry);
                assertNotNull(head, jar + " has no " + entry);
                assertEquals(expectedKind(p), kind(head), entry);
                listed.append(entry.substring("natives/".length())).append('\n');
            }
            byte[] txt = head(j, "natives/platforms.txt");
            assertNotNull(txt, "natives/platforms.txt");
            assertEquals(listed.toString(), new String(txt, StandardCharsets.UTF_8));
        }
    }

    /** The format and CPU a platform's library must have, in the words of {@link #kind}. */
    static String expectedKind(String platform) {
        String cpu = platform.endsWith("aarch64") ? "arm64" : "x86-64";
        if (platform.startsWith("linux")) {
            return "ELF " + cpu;
        }
        if (platform.startsWith("macos")) {
            return "Mach-O " + cpu;
        }
        return "PE " + cpu;
    }

    /**
     * The format and CPU a library's first bytes give: ELF (e_machine at 18: 0x3E x86-64, 0xB7 arm64), 64-bit
     * Mach-O (magic 0xFEEDFACF, cputype at 4: 0x01000007 x86-64, 0x0100000C arm64) or PE (MZ, e_lfanew at 0x3C,
     * Machine after "PE\0\0": 0x8664 x86-64, 0xAA64 arm64).
     */
    static String kind(byte[] b) {
        ByteBuffer le = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        if (b.length >= 20 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') {
            int machine = le.getShort(18) & 0xffff;
            return "ELF " + (machine == 0x3E ? "x86-64" : machine == 0xB7 ? "arm64" : "machine " + machine);
        }
        if (b.length >= 8 && le.getInt(0) == 0xFEEDFACF) {
            int cpu = le.getInt(4);
            return "Mach-O " + (cpu == 0x01000007 ? "x86-64" : cpu == 0x0100000C ? "arm64" : "cputype " + cpu);
        }
        if (b.length >= 0x40 && b[0] == 'M' && b[1] == 'Z') {
            int pe = le.getInt(0x3C);
            if (pe > 0 && pe + 6 <= b.length && le.getInt(pe) == 0x00004550) {
                int machine = le.getShort(pe + 4) & 0xffff;
                return "PE " + (machine == 0x8664 ? "x86-64" : machine == 0xAA64 ? "arm64" : "machine " + machine);
            }
        }
        return "unknown format";
    }

    /** The first 4 KiB of a jar entry (all of it when shorter), or null when the jar lacks it. */
    static byte[] head(JarFile jar, String name) throws IOException {
        ZipEntry e = jar.getEntry(name);
        if (e == null) {
            return null;
        }
        try (InputStream in = jar.getInputStream(e)) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[4096];
            int n;
            while (out.size() < 4096 && (n = in.read(buf, 0, 4096 - out.size())) > 0) {
                out.write(buf, 0, n);
            }
            assertTrue(out.size() > 0, name + " is empty");
            return out.toByteArray();
        }
    }
}
