package dev.moonbridge.client;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The project version as the build put it into {@code mcmod.info} (from {@code pom.xml}). */
final class ProjectVersion {
    private ProjectVersion() {}

    static String get() {
        try (InputStream in = ProjectVersion.class.getResourceAsStream("/mcmod.info")) {
            if (in == null) {
                throw new IllegalStateException("mcmod.info is not on the classpath");
            }
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            byte[] buf = new byte[4096];
            int n;
            while ((n = in.read(buf)) > 0) {
                out.write(buf, 0, n);
            }
            Matcher m = Pattern.compile("\"version\"\\s*:\\s*\"([^\"]+)\"").matcher(new String(out.toByteArray(), StandardCharsets.UTF_8));
            if (!m.find() || m.group(1).contains("$")) {
                throw new IllegalStateException("mcmod.info has no filtered version");
            }
            return m.group(1);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }
}
