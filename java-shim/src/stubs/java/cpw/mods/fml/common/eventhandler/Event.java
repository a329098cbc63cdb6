package cpw.mods.fml.common.eventhandler;

/** Stub of FML 1.7.10's event base class (compile-only). */
public class Event {}
