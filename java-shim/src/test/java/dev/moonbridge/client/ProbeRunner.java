package dev.moonbridge.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/** Runs {@link LoaderProbe} in another JVM and collects what it printed. */
final class ProbeRunner {
    /** A finished probe. */
    static final class Result {
        final int exit;
        final String out;

        Result(int exit, String out) {
            this.exit = exit;
            this.out = out;
        }

        /** Every line of the output containing {@code needle}. */
        List<String> lines(String needle) {
            List<String> found = new ArrayList<String>();
            for (String l : out.split("\\R")) {
                if (l.contains(needle)) {
                    found.add(l);
                }
            }
            return found;
        }

        /** The file after "loaded ", unescaped. */
        String loadedFrom() {
            List<String> l = lines("loaded ");
            return l.isEmpty() ? null : LoaderProbe.unescape(l.get(0).substring(l.get(0).indexOf("loaded ") + 7));
        }

        @Override
        public String toString() {
            return "exit " + exit + ":\n" + out;
        }
    }

    private ProbeRunner() {}

    /** A started probe on this machine's JVM with the test classpath. */
    static Process start(String... args) throws IOException {
        List<String> cmd = new ArrayList<String>();
        cmd.add(new File(System.getProperty("java.home"), "bin/java").getPath());
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(LoaderProbe.class.getName());
        cmd.addAll(Arrays.asList(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).start();
    }

    /** Waits up to {@code seconds} for {@code p} and returns its exit code and output. */
    static Result finish(Process p, int seconds) throws Exception {
        InputStream in = p.getInputStream();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Thread reader = new Thread(() -> {
            byte[] buf = new byte[8192];
            int n;
            try {
                while ((n = in.read(buf)) > 0) {
                    out.write(buf, 0, n);
                }
            } catch (IOException ignored) {
                // the process ended
            }
        });
        reader.start();
        if (!p.waitFor(seconds, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            reader.join(5000);
            throw new IllegalStateException("probe did not finish within " + seconds + " s:\n" + out);
        }
        reader.join(5000);
        return new Result(p.exitValue(), new String(out.toByteArray(), StandardCharsets.UTF_8));
    }

    static Result run(int seconds, String... args) throws Exception {
        return finish(start(args), seconds);
    }

    /** Deletes a directory tree (best effort, for test cleanup). */
    static void deleteTree(Path dir) {
        if (dir == null || !Files.exists(dir)) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }
}
