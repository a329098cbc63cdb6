package cpw.mods.fml.common.event;

import java.io.File;

/** Stub of FML 1.7.10's pre-initialisation event (compile-only). */
public class FMLPreInitializationEvent {
    public File getModConfigurationDirectory() {
        throw new UnsupportedOperationException("stub");
    }
}
