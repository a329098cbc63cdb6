package cpw.mods.fml.common.event;

/** Stub of FML 1.7.10's initialisation event (compile-only). */
public class FMLInitializationEvent {}
