package dev.moonbridge.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.nio.channels.FileLock;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Loads the MoonBridge native client library ({@code moonbridge_client}).
 *
 * <p>The jar carries one library per platform at {@code /natives/<os>-<arch>/<System.mapLibraryName>}: {@code
 * linux-x86_64}, {@code linux-aarch64}, {@code macos-x86_64}, {@code macos-aarch64} and {@code windows-x86_64}
 * (see {@link #platform()}). {@link #load()} extracts the one for this JVM and loads it. The system property
 * {@code moonbridge.native.path} names a library file to load instead.
 *
 * <p>Where it extracts: into a directory named after the first 16 hex digits of the library's SHA-256, under the
 * first of these that works: {@code <java.io.tmpdir>/moonbridge-natives-<user>}, {@code
 * <user.home>/.moonbridge/natives}, and on Windows {@code %ProgramData%\MoonBridge\natives-<user>}, where
 * {@code <user>} is the user name's letters and digits and 8 hex digits of its SHA-256. A directory
 * is skipped when it cannot be created or written (a read-only temporary directory), when another user owns it,
 * or, on Windows, when its path has characters the JVM cannot pass to the system loader (the ANSI code page:
 * a user name in another alphabet); the next one is tried. An earlier extraction is reused only when its
 * SHA-256 is exactly that of the jar's library; several game instances extracting at once take turns under a
 * file lock, write to a temporary file and move it into place, so none ever loads a half-written library.
 *
 * <p>An unsupported platform, or no usable directory, gets an {@link UnsatisfiedLinkError} whose message says
 * which platform, which platforms the jar has, and what each directory tried failed with.
 */
public final class NativeLoader {
    /** System property naming a library file to load instead of the one in the jar. */
    public static final String PATH_PROPERTY = "moonbridge.native.path";
    /** The library's base name, as passed to {@link System#mapLibraryName(String)}. */
    public static final String LIBRARY = "moonbridge_client";
    /** The name of the lock file in an extraction directory. */
    static final String LOCK_FILE = ".lock";

    private static volatile File loadedFrom;
    /** Why loading from the jar failed, once it has: later calls fail at once with the same reason. */
    private static volatile String jarFailure;

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

    /**
     * The jar's platform name for an {@code os.name} and {@code os.arch}: {@code windows}, {@code macos} or
     * {@code linux}, then {@code x86_64} ({@code amd64}, {@code x86_64}, {@code x64}) or {@code aarch64}
     * ({@code aarch64}, {@code arm64}). 32-bit JVMs ({@code x86}, {@code i386}...) map to {@code x86}, which no
     * jar carries: the error then tells the player to install a 64-bit Java.
     */
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
        if (a.equals("amd64") || a.equals("x86_64") || a.equals("x64") || a.equals("x86-64")) {
            arch = "x86_64";
        } else if (a.equals("aarch64") || a.equals("arm64")) {
            arch = "aarch64";
        } else if (a.equals("x86") || a.equals("i386") || a.equals("i486") || a.equals("i586") || a.equals("i686")) {
            arch = "x86";
        } else {
            arch = a.replaceAll("[^a-z0-9_]", "");
        }
        return os + "-" + arch;
    }

    /** The resource path of the library for {@code platform}. */
    static String resourcePath(String platform) {
        return "/natives/" + platform + "/" + libraryFileName(platform);
    }

    /** The library's file name on {@code platform} (independent of the platform this JVM runs on). */
    static String libraryFileName(String platform) {
        if (platform.startsWith("windows-")) {
            return LIBRARY + ".dll";
        }
        if (platform.startsWith("macos-")) {
            return "lib" + LIBRARY + ".dylib";
        }
        return "lib" + LIBRARY + ".so";
    }

    /**
     * Loads the library once (later calls return at once).
     *
     * @throws UnsatisfiedLinkError when this platform has no library in the jar, the override file is missing,
     *     no extraction directory is usable, or the JVM refuses the library; the message says which
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
        if (jarFailure != null) {
            throw new UnsatisfiedLinkError(jarFailure);
        }
        try {
            loadFromJar(platform());
        } catch (UnsatisfiedLinkError e) {
            // Every later call (route discovery asks for every server-list entry) fails at once instead of
            // reading, hashing and extracting the library again.
            jarFailure = e.getMessage();
            throw e;
        }
    }

    static synchronized void loadFromJar(String platform) {
        byte[] bytes = readResource(platform);
        String hash = sha256Hex(bytes);
        String name = libraryFileName(platform);
        List<String> failures = new ArrayList<String>();
        for (File base : extractionBases()) {
            File file;
            try {
                file = extract(base, hash, name, bytes);
            } catch (IOException | RuntimeException e) {
                failures.add(base + " (" + e.getMessage() + ")");
                continue;
            }
            try {
                System.load(file.getPath());
            } catch (UnsatisfiedLinkError e) {
                // On Windows the library needs Windows 10 or later (bcryptprimitives.dll); older ones report a
                // missing dependent library.
                String hint = platform.startsWith("windows-") ? "; MoonBridge needs Windows 10 or later" : "";
                failures.add(file + " (the JVM refused it: " + e.getMessage() + hint + ")");
                continue;
            }
            loadedFrom = file;
            return;
        }
        throw new UnsatisfiedLinkError("MoonBridge: cannot extract and load the native library for " + platform
                + "; tried " + String.join("; ", failures));
    }

    private static byte[] readResource(String platform) {
        String resource = resourcePath(platform);
        try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
            if (in == null) {
                String hint = platform.endsWith("-x86")
                        ? " This is a 32-bit Java: install a 64-bit Java to join MoonBridge servers."
                        : " Set -D" + PATH_PROPERTY + "=<file> to use a library built for this platform.";
                throw new UnsatisfiedLinkError("MoonBridge: no native library for platform " + platform + " in this jar ("
                        + resource.substring(1) + "); it has: " + availablePlatforms() + "." + hint);
            }
            return readAll(in);
        } catch (IOException e) {
            UnsatisfiedLinkError err = new UnsatisfiedLinkError("MoonBridge: cannot read " + resource + " from the jar: " + e);
            err.initCause(e);
            throw err;
        }
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

    /** The directories tried for extraction, in order (see the class documentation). */
    static List<File> extractionBases() {
        // The readable part of the user name, and a hash of all of it: names in other alphabets stay apart.
        String name = System.getProperty("user.name", "user");
        String user = name.replaceAll("[^A-Za-z0-9_.-]", "_") + "-"
                + sha256Hex(name.getBytes(StandardCharsets.UTF_8)).substring(0, 8);
        List<File> bases = new ArrayList<File>();
        String tmp = System.getProperty("java.io.tmpdir");
        if (tmp != null && !tmp.isEmpty()) {
            bases.add(new File(tmp, "moonbridge-natives-" + user));
        }
        String home = System.getProperty("user.home");
        if (home != null && !home.isEmpty()) {
            bases.add(new File(new File(home, ".moonbridge"), "natives"));
        }
        String programData = System.getenv("ProgramData");
        if (isWindows() && programData != null && !programData.isEmpty()) {
            bases.add(new File(new File(programData, "MoonBridge"), "natives-" + user));
        }
        return bases;
    }

    private static boolean isWindows() {
        return System.getProperty("os.name", "").toLowerCase(Locale.ROOT).startsWith("windows");
    }

    /**
     * True when the JVM can hand {@code path} to the system loader: always, except on Windows, where a path
     * outside the ANSI code page ({@code sun.jnu.encoding}) may not load.
     */
    static boolean loadablePath(String path) {
        if (!isWindows()) {
            return true;
        }
        try {
            return Charset.forName(System.getProperty("sun.jnu.encoding", "UTF-8")).newEncoder().canEncode(path);
        } catch (RuntimeException e) {
            return true;
        }
    }

    /**
     * Puts the library into {@code <base>/<hash prefix>/<name>} unless an identical file is already there, and
     * returns that file. Concurrent extractions (several game instances) take turns under a file lock.
     */
    static File extract(File base, String hash, String name, byte[] bytes) throws IOException {
        File dir = new File(base, hash.substring(0, 16));
        File file = new File(dir, name);
        if (!loadablePath(file.getAbsolutePath())) {
            throw new IOException("its path has characters this system's code page ("
                    + System.getProperty("sun.jnu.encoding") + ") cannot name");
        }
        privateDirectory(base);
        privateDirectory(dir);
        // The temporary directory is shared: a file there is never trusted by its name or size alone.
        if (sameContent(file, hash)) {
            return file;
        }
        try (RandomAccessFile lockFile = new RandomAccessFile(new File(dir, LOCK_FILE), "rw");
                FileLock lock = lockFile.getChannel().lock()) {
            if (sameContent(file, hash)) {
                return file; // another instance extracted it while this one waited
            }
            File tmp = uniqueFile(dir, ".part");
            try {
                try (FileOutputStream out = new FileOutputStream(tmp)) {
                    out.write(bytes);
                    out.getFD().sync();
                }
                move(tmp.toPath(), file.toPath());
            } finally {
                Files.deleteIfExists(tmp.toPath());
            }
            if (!sameContent(file, hash)) {
                throw new IOException(file + " does not hold the library after extraction");
            }
            return file;
        }
    }

    private static void move(Path from, Path to) throws IOException {
        try {
            Files.move(from, to, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(from, to, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    /**
     * Creates a new empty file in {@code dir} with a name no other process uses. Not {@code File.createTempFile}:
     * that seeds a {@code SecureRandom}, which costs start-up time and crashes some JVMs under Wine; the names
     * need no secrecy, because creation fails if the name exists and the directory is private.
     */
    private static File uniqueFile(File dir, String suffix) throws IOException {
        String base = LIBRARY + "-" + Long.toHexString(System.nanoTime()) + "-"
                + Integer.toHexString(System.identityHashCode(new Object()));
        for (int i = 0; ; i++) {
            File f = new File(dir, base + "-" + i + suffix);
            try {
                Files.createFile(f.toPath());
                return f;
            } catch (java.nio.file.FileAlreadyExistsException e) {
                if (i >= 100) {
                    throw e;
                }
            }
        }
    }

    private static boolean sameContent(File file, String hash) throws IOException {
        return file.isFile() && hash.equals(sha256Hex(Files.readAllBytes(file.toPath())));
    }

    /**
     * Creates {@code dir} readable and writable by this user only where the file system supports POSIX
     * permissions, and refuses a directory that another user owns (compared with the owner of a file this
     * process creates there; on POSIX systems and NTFS alike). Fails when the directory cannot be created or
     * written.
     */
    private static void privateDirectory(File dir) throws IOException {
        Path p = dir.toPath();
        boolean posix = p.getFileSystem().supportedFileAttributeViews().contains("posix");
        boolean owners = p.getFileSystem().supportedFileAttributeViews().contains("owner");
        if (!dir.isDirectory()) {
            if (posix) {
                Files.createDirectories(p, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
            } else {
                Files.createDirectories(p);
            }
        }
        // Proves the directory is writable, and tells who "this user" is.
        Path probe = uniqueFile(dir, ".probe").toPath();
        try {
            if (owners) {
                String me = Files.getOwner(probe).getName();
                String owner = Files.getOwner(p).getName();
                if (!owner.equals(me)) {
                    throw new IOException(dir + " belongs to " + owner + ", not to " + me);
                }
            }
        } finally {
            Files.deleteIfExists(probe);
        }
    }

    static String sha256Hex(byte[] bytes) {
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
}
