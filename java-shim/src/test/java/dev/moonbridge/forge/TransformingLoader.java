package dev.moonbridge.forge;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.commons.RemappingClassAdapter;
import org.objectweb.asm.commons.SimpleRemapper;

/**
 * Loads the {@code net.minecraft.*} test fixtures through {@link MoonBridgeTransformer}, the way LaunchWrapper
 * does in the game (child-first for those names; everything else from the parent). A fixture may be swapped for
 * a variant ({@code fixtures.variants.*}) renamed to the target's name, standing in for a class another mod
 * changed first.
 */
final class TransformingLoader extends ClassLoader {
    private final boolean transform;
    private final Map<String, String> variants;
    private final Set<String> untouched;

    TransformingLoader(boolean transform) {
        this(transform, Collections.<String, String>emptyMap());
    }

    /** {@code variants}: target class name to the variant class whose bytes stand in for it. */
    TransformingLoader(boolean transform, Map<String, String> variants) {
        this(transform, variants, Collections.<String>emptySet());
    }

    /** As above; the classes named in {@code untouched} are loaded without the transformer (a partial patch). */
    TransformingLoader(boolean transform, Map<String, String> variants, Set<String> untouched) {
        super(TransformingLoader.class.getClassLoader());
        this.transform = transform;
        this.variants = variants;
        this.untouched = untouched;
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

    /**
     * The bytes of {@code variant + suffix} (the class or one of its inner classes), with {@code variant} renamed
     * to {@code target} everywhere (inner classes with it).
     */
    static byte[] renamed(String variant, String target, String suffix) throws IOException {
        Map<String, String> names = new HashMap<String, String>();
        String from = variant.replace('.', '/');
        String to = target.replace('.', '/');
        names.put(from, to);
        for (int i = 1; i <= 4; i++) {
            names.put(from + "$" + i, to + "$" + i);
        }
        ClassWriter w = new ClassWriter(0);
        new ClassReader(bytesOf(variant + suffix)).accept(new RemappingClassAdapter(w, new SimpleRemapper(names)), ClassReader.EXPAND_FRAMES);
        return w.toByteArray();
    }

    @Override
    protected synchronized Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
        String base = name.contains("$") ? name.substring(0, name.indexOf('$')) : name;
        if (!name.startsWith("net.minecraft.") && !variants.containsKey(base)) {
            return super.loadClass(name, resolve);
        }
        Class<?> c = findLoadedClass(name);
        if (c == null) {
            try {
                String variant = variants.get(base);
                byte[] bytes = variant == null ? bytesOf(name) : renamed(variant, base, name.substring(base.length()));
                if (transform && !untouched.contains(name)) {
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
