package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * NativeLoader without the jar: platform names, an unsupported platform, and the path override. Each test
 * stands alone (any order) and none depends on the build machine's platform.
 */
class NativeLoaderTest {
    @AfterEach
    void clearOverride() {
        System.clearProperty(NativeLoader.PATH_PROPERTY);
    }

    @Test
    void platformNames() {
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "amd64"));
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "x86_64"));
        assertEquals("linux-aarch64", NativeLoader.platform("Linux", "aarch64"));
        assertEquals("windows-x86_64", NativeLoader.platform("Windows 10", "amd64"));
        assertEquals("windows-x86_64", NativeLoader.platform("Windows 11", "x86_64"));
        assertEquals("windows-aarch64", NativeLoader.platform("Windows 11", "aarch64"));
        assertEquals("windows-x86", NativeLoader.platform("Windows 7", "x86"));
        assertEquals("macos-aarch64", NativeLoader.platform("Mac OS X", "aarch64"));
        assertEquals("macos-aarch64", NativeLoader.platform("Mac OS X", "arm64"));
        assertEquals("macos-x86_64", NativeLoader.platform("Mac OS X", "x86_64"));
        assertEquals("macos-x86_64", NativeLoader.platform("Darwin", "amd64"));
        assertEquals("/natives/linux-x86_64/libmoonbridge_client.so", NativeLoader.resourcePath("linux-x86_64"));
        assertEquals("/natives/windows-x86_64/moonbridge_client.dll", NativeLoader.resourcePath("windows-x86_64"));
        assertEquals("/natives/macos-aarch64/libmoonbridge_client.dylib", NativeLoader.resourcePath("macos-aarch64"));
    }

    @Test
    void unsupportedPlatformGetsAClearMessage() {
        File before = NativeLoader.loadedFrom();
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, () -> NativeLoader.loadFromJar("solaris-sparcv9"));
        assertTrue(e.getMessage().contains("no native library for platform solaris-sparcv9"), e.getMessage());
        assertTrue(e.getMessage().contains("it has: ") && e.getMessage().contains(NativeLoader.platform()),
                "the platforms the jar has, this one among them: " + e.getMessage());
        assertTrue(e.getMessage().contains(NativeLoader.PATH_PROPERTY), e.getMessage());
        assertSame(before, NativeLoader.loadedFrom(), "nothing loaded");
    }

    @Test
    void a32BitJavaIsToldToInstallA64BitOne() {
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, () -> NativeLoader.loadFromJar("windows-x86"));
        assertTrue(e.getMessage().contains("install a 64-bit Java"), e.getMessage());
    }

    @Test
    void overrideNamingAMissingFileIsRefused() {
        File before = NativeLoader.loadedFrom();
        System.setProperty(NativeLoader.PATH_PROPERTY, "/nonexistent/libmoonbridge_client.so");
        if (before == null) {
            UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, NativeLoader::load);
            assertTrue(e.getMessage().contains("/nonexistent/libmoonbridge_client.so"), e.getMessage());
            assertFalse(NativeLoader.isLoaded());
        } else {
            NativeLoader.load(); // already loaded: later calls return at once
            assertSame(before, NativeLoader.loadedFrom());
        }
    }

    @Test
    void overrideLoadsTheNamedFile() {
        String lib = System.getProperty("moonbridge.test.lib");
        assertTrue(lib != null && new File(lib).isFile(), "build.sh passes -Dmoonbridge.test.lib (got " + lib + ")");
        System.setProperty(NativeLoader.PATH_PROPERTY, lib);
        NativeLoader.load();
        assertEquals(new File(lib).getAbsoluteFile(), NativeLoader.loadedFrom());
        assertEquals(ProjectVersion.get(), NativeTransport.nativeVersion());
    }
}
