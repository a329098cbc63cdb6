package net.minecraft.launchwrapper;

/** Stub of LaunchWrapper's class transformer interface (compile-only). */
public interface IClassTransformer {
    byte[] transform(String name, String transformedName, byte[] basicClass);
}
