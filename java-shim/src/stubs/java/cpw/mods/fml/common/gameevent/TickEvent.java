package cpw.mods.fml.common.gameevent;

import cpw.mods.fml.common.eventhandler.Event;

/** Stub of FML 1.7.10's tick events (compile-only). */
public class TickEvent extends Event {
    public enum Phase {
        START,
        END
    }

    public final Phase phase;

    public TickEvent(Phase phase) {
        this.phase = phase;
    }

    public static class ClientTickEvent extends TickEvent {
        public ClientTickEvent(Phase phase) {
            super(phase);
        }
    }
}
