package dev.moonbridge.forge;

import cpw.mods.fml.common.FMLCommonHandler;
import cpw.mods.fml.common.Mod;
import cpw.mods.fml.common.event.FMLInitializationEvent;
import cpw.mods.fml.common.event.FMLPreInitializationEvent;
import cpw.mods.fml.common.eventhandler.SubscribeEvent;
import cpw.mods.fml.common.gameevent.TickEvent;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import java.io.File;

/**
 * The mod: reads {@code config/moonbridge.cfg}, checks the native library once, and ends the tick on every
 * MoonBridge connection at the end of each client tick. Client-side only; servers need nothing. Its version
 * comes from {@code mcmod.info} ({@code useMetadata}), which Maven fills in from the project version: the
 * version lives in {@code pom.xml} only.
 */
@Mod(modid = MoonBridgeMod.MODID, name = "MoonBridge", useMetadata = true, acceptedMinecraftVersions = "[1.7.10]",
        acceptableRemoteVersions = "*")
public class MoonBridgeMod {
    public static final String MODID = "moonbridge";

    @Mod.EventHandler
    public void preInit(FMLPreInitializationEvent event) {
        if (!MoonBridgeHooks.isConfigured()) {
            MoonBridgeHooks.configure(new File(event.getModConfigurationDirectory(), "moonbridge.cfg"));
        }
        MoonBridgeHooks.nativeAvailable();
    }

    @Mod.EventHandler
    public void init(FMLInitializationEvent event) {
        FMLCommonHandler.instance().bus().register(new TickHook());
    }

    /** Ends the tick on every MoonBridge channel when the client tick ends. */
    public static final class TickHook {
        @SubscribeEvent
        public void onClientTick(TickEvent.ClientTickEvent event) {
            if (event.phase == TickEvent.Phase.END) {
                MoonBridgeChannel.endTickAll();
            }
        }
    }
}
