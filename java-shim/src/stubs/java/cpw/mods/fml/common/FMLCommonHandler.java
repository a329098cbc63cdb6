package cpw.mods.fml.common;

import cpw.mods.fml.common.eventhandler.EventBus;

/** Stub of FML 1.7.10's common handler (compile-only). */
public class FMLCommonHandler {
    public static FMLCommonHandler instance() {
        throw new UnsupportedOperationException("stub");
    }

    public EventBus bus() {
        throw new UnsupportedOperationException("stub");
    }
}
