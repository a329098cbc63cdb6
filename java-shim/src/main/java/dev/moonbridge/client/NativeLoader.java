package dev.moonbridge.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Locale;

/**
 * Loads the MoonBridge native client library ({@code moonbridge_client}).
 *
 * <p>The jar carries one library per platform at {@code /natives/<os>-<arch>/<System.mapLibraryName>}, for
 * example {@code /natives/linux-x86_64/libmoonbridge_client.so}. {@link #load()} extracts the one for this JVM
 * into {@code <java.io.tmpdir>/moonbridge-natives-<user>/<sha256 prefix>/} (owner-only; reused only when the
 * file there has exactly the same SHA-256) and loads it. The system property {@code moonbridge.native.path} names a library file to load instead.
 * An unsupported platform gets an {@link UnsatisfiedLinkError} saying which platform and which ones the jar
 * has.
 */
public final class NativeLoader {
    /** System property naming a library file to load instead of the one in the jar. */
    public static final String PATH_PROPERTY = "moonbridge.native.path";
    /** The library's base name, as passed to {@link System#mapLibraryName(String)}. */
    public static final String LIBRARY = "moonbridge_client";

    private static volatile File loadedFrom;

    private NativeLoader() {}

    /** True once the library is loaded in this class loader. */
    public static boolean isLoaded() {
        return loadedFrom != null;
    }

    /** The file the library was loaded from, or {@code null} before {@link #load()}. */
    public static File loadedFrom() {
        return loadedFrom;
    }

    /** This JVM's platform as the jar names it, such as {@code linux-x86_64} or {@code windows-x86_64}. */
    public static String platform() {
        return platform(System.getProperty("os.name", ""), System.getProperty("os.arch", ""));
    }

    static String platform(String osName, String osArch) {
        String n = osName.toLowerCase(Locale.ROOT);
        String os;
        if (n.startsWith("linux")) {
            os = "linux";
        } else if (n.startsWith("windows")) {
            os = "windows";
        } else if (n.startsWith("mac") || n.contains("darwin")) {
            os = "macos";
        } else {
            os = n.replaceAll("[^a-z0-9]", "");
        }
        String a = osArch.toLowerCase(Locale.ROOT);
        String arch;
        if (a.equals("amd64") || a.equals("x86_64") || a.equals("x64")) {
            arch = "x86_64";
        } else if (a.equals("aarch64") || a.equals("arm64")) {
            arch = "aarch64";
        } else {
            arch = a.replaceAll("[^a-z0-9_]", "");
        }
        return os + "-" + arch;
    }

    /** The resource path of the library for {@code platform}. */
    static String resourcePath(String platform) {
        return "/natives/" + platform + "/" + System.mapLibraryName(LIBRARY);
    }

    /**
     * Loads the library once (later calls return at once).
     *
     * @throws UnsatisfiedLinkError when this platform has no library in the jar, the override file is missing,
     *     or the JVM refuses the library; the message says which
     */
    public static synchronized void load() {
        if (loadedFrom != null) {
            return;
        }
        String override = System.getProperty(PATH_PROPERTY);
        if (override != null && !override.isEmpty()) {
            File f = new File(override).getAbsoluteFile();
            if (!f.isFile()) {
                throw new UnsatisfiedLinkError("MoonBridge: " + PATH_PROPERTY + " names " + f + ", which is not a file");
            }
            System.load(f.getPath());
            loadedFrom = f;
            return;
        }
        loadFromJar(platform());
    }

    static synchronized void loadFromJar(String platform) {
        String resource = resourcePath(platform);
        byte[] bytes;
        try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new UnsatisfiedLinkError("MoonBridge: no native library for platform " + platform + " in this jar ("
                        + resource.substring(1) + "); it has: " + availablePlatforms()
                        + ". Set -D" + PATH_PROPERTY + "=<file> to use a library built for this platform.");
            }
            bytes = readAll(in);
        } catch (IOException e) {
            throw link("MoonBridge: cannot read " + resource + " from the jar", e);
        }
        File file;
        try {
            file = extract(bytes);
        } catch (IOException e) {
            throw link("MoonBridge: cannot extract the native library", e);
        }
        System.load(file.getPath());
        loadedFrom = file;
    }

    /** The platforms the jar carries, from {@code /natives/platforms.txt} (written by build.sh). */
    static String availablePlatforms() {
        try (InputStream in = NativeLoader.class.getResourceAsStream("/natives/platforms.txt")) {
            if (in == null) {
                return "none";
            }
            String list = new String(readAll(in), StandardCharsets.UTF_8).trim();
            StringBuilder out = new StringBuilder();
            for (String line : list.split("\n")) {
                int slash = line.indexOf('/');
                String p = slash > 0 ? line.substring(0, slash) : line;
                if (!p.isEmpty() && out.indexOf(p) < 0) {
                    out.append(out.length() == 0 ? "" : ", ").append(p);
                }
            }
            return out.length() == 0 ? "none" : out.toString();
        } catch (IOException e) {
            return "unknown";
        }
    }

    private static File extract(byte[] bytes) throws IOException {
        String user = System.getProperty("user.name", "user").replaceAll("[^A-Za-z0-9_.-]", "_");
        File base = new File(System.getProperty("java.io.tmpdir"), "moonbridge-natives-" + user);
        String hash = sha256Hex(bytes);
        File dir = new File(base, hash.substring(0, 16));
        File file = new File(dir, System.mapLibraryName(LIBRARY));
        privateDirectory(base);
        // Reuse an earlier extraction only when its content is exactly this library: the temporary directory
        // is shared, so a file there is never trusted by its name or size alone.
        if (file.isFile() && file.length() == bytes.length && hash.equals(sha256Hex(java.nio.file.Files.readAllBytes(file.toPath())))) {
            return file;
        }
        privateDirectory(dir);
        File tmp = File.createTempFile(LIBRARY, ".part", dir);
        try (OutputStream out = new FileOutputStream(tmp)) {
            out.write(bytes);
        }
        if (!tmp.renameTo(file) && !(file.isFile() && file.length() == bytes.length)) {
            tmp.delete();
            throw new IOException("cannot move " + tmp + " to " + file);
        }
        tmp.delete();
        return file;
    }

    /**
     * Creates {@code dir} readable and writable by this user only where the file system supports POSIX
     * permissions, and refuses a directory that another user owns.
     */
    private static void privateDirectory(File dir) throws IOException {
        java.nio.file.Path p = dir.toPath();
        if (!dir.isDirectory()) {
            try {
                java.nio.file.Files.createDirectories(p, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                        java.nio.file.attribute.PosixFilePermissions.fromString("rwx------")));
            } catch (UnsupportedOperationException e) {
                if (!dir.mkdirs() && !dir.isDirectory()) {
                    throw new IOException("cannot create " + dir);
                }
            }
        }
        try {
            java.nio.file.attribute.UserPrincipal owner = java.nio.file.Files.getOwner(p);
            String me = System.getProperty("user.name");
            if (me != null && !owner.getName().equals(me)) {
                throw new IOException(dir + " belongs to " + owner.getName() + ", not to " + me);
            }
        } catch (UnsupportedOperationException e) {
            // no owner information on this file system
        }
    }

    private static String sha256Hex(byte[] bytes) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(bytes);
            StringBuilder s = new StringBuilder();
            for (byte b : d) {
                s.append(String.format("%02x", b & 0xff));
            }
            return s.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required of every JVM", e);
        }
    }

    private static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buf = new byte[65536];
        int n;
        while ((n = in.read(buf)) > 0) {
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }

    private static UnsatisfiedLinkError link(String message, Throwable cause) {
        UnsatisfiedLinkError e = new UnsatisfiedLinkError(message + ": " + cause);
        e.initCause(cause);
        return e;
    }
}
