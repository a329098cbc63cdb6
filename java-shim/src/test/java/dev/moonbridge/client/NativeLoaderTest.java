package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/** NativeLoader without the jar: platform names, an unsupported platform, and the path override. */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class NativeLoaderTest {
    @Test
    @Order(1)
    void platformNames() {
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "amd64"));
        assertEquals("linux-aarch64", NativeLoader.platform("Linux", "aarch64"));
        assertEquals("windows-x86_64", NativeLoader.platform("Windows 10", "amd64"));
        assertEquals("macos-aarch64", NativeLoader.platform("Mac OS X", "aarch64"));
        assertEquals("macos-x86_64", NativeLoader.platform("Mac OS X", "x86_64"));
        assertEquals("/natives/linux-x86_64/" + System.mapLibraryName("moonbridge_client"),
                NativeLoader.resourcePath("linux-x86_64"));
    }

    @Test
    @Order(2)
    void unsupportedPlatformGetsAClearMessage() {
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, () -> NativeLoader.loadFromJar("solaris-sparcv9"));
        assertTrue(e.getMessage().contains("no native library for platform solaris-sparcv9"), e.getMessage());
        assertTrue(e.getMessage().contains("it has: linux-x86_64"), e.getMessage());
        assertTrue(e.getMessage().contains(NativeLoader.PATH_PROPERTY), e.getMessage());
        assertFalse(NativeLoader.isLoaded());
    }

    @Test
    @Order(3)
    void overrideNamingAMissingFileIsRefused() {
        System.setProperty(NativeLoader.PATH_PROPERTY, "/nonexistent/libmoonbridge_client.so");
        try {
            UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, NativeLoader::load);
            assertTrue(e.getMessage().contains("/nonexistent/libmoonbridge_client.so"), e.getMessage());
            assertFalse(NativeLoader.isLoaded());
        } finally {
            System.clearProperty(NativeLoader.PATH_PROPERTY);
        }
    }

    @Test
    @Order(4)
    void overrideLoadsTheNamedFile() {
        String lib = System.getProperty("moonbridge.test.lib");
        assertTrue(lib != null && new File(lib).isFile(), "build.sh passes -Dmoonbridge.test.lib (got " + lib + ")");
        System.setProperty(NativeLoader.PATH_PROPERTY, lib);
        try {
            NativeLoader.load();
            assertEquals(new File(lib).getAbsoluteFile(), NativeLoader.loadedFrom());
            assertEquals("0.1.0", NativeTransport.nativeVersion());
        } finally {
            System.clearProperty(NativeLoader.PATH_PROPERTY);
        }
    }
}
