package dev.moonbridge.forge;

import cpw.mods.fml.relauncher.IFMLLoadingPlugin;
import java.io.File;
import java.util.Map;

/**
 * The coremod (named in the jar manifest as {@code FMLCorePlugin}). Sorting index 1001 puts the transformer after
 * FML's deobfuscation, so it sees MCP class names and SRG member names.
 */
@IFMLLoadingPlugin.Name("MoonBridge")
@IFMLLoadingPlugin.MCVersion("1.7.10")
@IFMLLoadingPlugin.SortingIndex(1001)
@IFMLLoadingPlugin.TransformerExclusions({"dev.moonbridge."})
public class MoonBridgeCoremod implements IFMLLoadingPlugin {
    @Override
    public String[] getASMTransformerClass() {
        return new String[] {MoonBridgeTransformer.class.getName()};
    }

    @Override
    public String getModContainerClass() {
        return null;
    }

    @Override
    public String getSetupClass() {
        return null;
    }

    @Override
    public void injectData(Map<String, Object> data) {
        // Read the configuration as early as possible, so even a server list shown before the mod's
        // pre-initialisation sees the routes.
        Object mcLocation = data.get("mcLocation");
        if (mcLocation instanceof File && !MoonBridgeHooks.isConfigured()) {
            MoonBridgeHooks.configure(new File(new File((File) mcLocation, "config"), "moonbridge.cfg"));
        }
    }

    @Override
    public String getAccessTransformerClass() {
        return null;
    }
}
