package cpw.mods.fml.common.eventhandler;

/** Stub of FML 1.7.10's event bus (compile-only). */
public class EventBus {
    public void register(Object target) {
        throw new UnsupportedOperationException("stub");
    }
}
