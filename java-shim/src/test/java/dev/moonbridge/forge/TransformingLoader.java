package dev.moonbridge.forge;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;

/**
 * Loads the {@code net.minecraft.*} test fixtures through {@link MoonBridgeTransformer}, the way LaunchWrapper
 * does in the game (child-first for those names; everything else from the parent).
 */
final class TransformingLoader extends ClassLoader {
    private final boolean transform;

    TransformingLoader(boolean transform) {
        super(TransformingLoader.class.getClassLoader());
        this.transform = transform;
    }

    static byte[] bytesOf(String className) throws IOException {
        String resource = "/" + className.replace('.', '/') + ".class";
        try (InputStream in = TransformingLoader.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IOException("no class file " + resource);
            }
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[8192];
            int n;
            while ((n = in.read(buf)) > 0) {
                out.write(buf, 0, n);
            }
            return out.toByteArray();
        }
    }

    @Override
    protected synchronized Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
        if (!name.startsWith("net.minecraft.")) {
            return super.loadClass(name, resolve);
        }
        Class<?> c = findLoadedClass(name);
        if (c == null) {
            try {
                byte[] bytes = bytesOf(name);
                if (transform) {
                    bytes = new MoonBridgeTransformer().transform(name, name, bytes);
                }
                c = defineClass(name, bytes, 0, bytes.length);
            } catch (IOException e) {
                throw new ClassNotFoundException(name, e);
            }
        }
        if (resolve) {
            resolveClass(c);
        }
        return c;
    }
}
