package dev.moonbridge.forge;

import net.minecraft.launchwrapper.IClassTransformer;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;
import org.objectweb.asm.tree.AbstractInsnNode;
import org.objectweb.asm.tree.ClassNode;
import org.objectweb.asm.tree.InsnList;
import org.objectweb.asm.tree.LdcInsnNode;
import org.objectweb.asm.tree.MethodInsnNode;
import org.objectweb.asm.tree.MethodNode;
import org.objectweb.asm.tree.VarInsnNode;

/**
 * The coremod's class transformer (ASM 5 API, as Forge 1.7.10 ships). It runs after FML's deobfuscation
 * ({@code SortingIndex(1001)}), so class names are MCP names and members SRG names ({@code func_...}); the MCP
 * names of a development workspace are accepted too. Targets (see docs/java-shim.md for sources):
 *
 * <ul>
 *   <li>{@code net.minecraft.network.NetworkManager.func_150726_a(InetAddress, int)} (provideLanClient): the
 *       {@code NioSocketChannel.class} constant becomes {@link MoonBridgeHooks#channelClass}.</li>
 *   <li>{@code net.minecraft.client.multiplayer.ServerAddress.func_78860_a(String)}: the argument first goes
 *       through {@link MoonBridgeHooks#rewriteServerAddress}.</li>
 *   <li>{@code net.minecraft.client.multiplayer.GuiConnecting$1.run()} and
 *       {@code net.minecraft.client.network.OldServerPinger.func_147224_a(ServerData)}: {@code
 *       InetAddress.getByName} becomes {@link MoonBridgeHooks#resolve}.</li>
 * </ul>
 *
 * A class whose target is not found is logged and returned unchanged; an exception while patching also
 * leaves the class unchanged. The game is never broken by this transformer.
 */
public class MoonBridgeTransformer implements IClassTransformer {
    static final String HOOKS = "dev/moonbridge/forge/MoonBridgeHooks";

    static final String NETWORK_MANAGER = "net.minecraft.network.NetworkManager";
    static final String SERVER_ADDRESS = "net.minecraft.client.multiplayer.ServerAddress";
    static final String GUI_CONNECTING_THREAD = "net.minecraft.client.multiplayer.GuiConnecting$1";
    static final String OLD_SERVER_PINGER = "net.minecraft.client.network.OldServerPinger";

    @Override
    public byte[] transform(String name, String transformedName, byte[] basicClass) {
        if (basicClass == null || transformedName == null) {
            return basicClass;
        }
        try {
            if (transformedName.equals(NETWORK_MANAGER)) {
                return patch(basicClass, transformedName, new String[] {"func_150726_a", "provideLanClient"},
                        "(Ljava/net/InetAddress;I)Lnet/minecraft/network/NetworkManager;", Patch.CHANNEL_CLASS);
            }
            if (transformedName.equals(SERVER_ADDRESS)) {
                return patch(basicClass, transformedName, new String[] {"func_78860_a"},
                        "(Ljava/lang/String;)Lnet/minecraft/client/multiplayer/ServerAddress;", Patch.REWRITE_ADDRESS);
            }
            if (transformedName.equals(GUI_CONNECTING_THREAD)) {
                return patch(basicClass, transformedName, new String[] {"run"}, "()V", Patch.RESOLVE);
            }
            if (transformedName.equals(OLD_SERVER_PINGER)) {
                return patch(basicClass, transformedName, new String[] {"func_147224_a"},
                        "(Lnet/minecraft/client/multiplayer/ServerData;)V", Patch.RESOLVE);
            }
        } catch (Throwable t) {
            MoonBridgeHooks.LOG.error("MoonBridge: patching " + transformedName + " failed; leaving it unchanged", t);
        }
        return basicClass;
    }

    enum Patch {
        CHANNEL_CLASS,
        REWRITE_ADDRESS,
        RESOLVE
    }

    static byte[] patch(byte[] bytes, String className, String[] names, String desc, Patch patch) {
        ClassNode node = new ClassNode();
        new ClassReader(bytes).accept(node, 0);
        int patched = 0;
        for (MethodNode m : node.methods) {
            if (!desc.equals(m.desc) || !contains(names, m.name)) {
                continue;
            }
            patched += apply(m, patch);
        }
        if (patched == 0) {
            MoonBridgeHooks.LOG.warn("MoonBridge: no {} target found in {} ({}{}); leaving the class unchanged",
                    patch, className, names[0], desc);
            return bytes;
        }
        ClassWriter w = new ClassWriter(ClassWriter.COMPUTE_MAXS);
        node.accept(w);
        MoonBridgeHooks.LOG.info("MoonBridge: patched {}.{} ({} site(s), {})", className, names[0], patched, patch);
        return w.toByteArray();
    }

    private static int apply(MethodNode m, Patch patch) {
        int sites = 0;
        switch (patch) {
            case CHANNEL_CLASS:
                for (AbstractInsnNode insn = m.instructions.getFirst(); insn != null; insn = insn.getNext()) {
                    if (insn instanceof LdcInsnNode && ((LdcInsnNode) insn).cst instanceof Type
                            && ((Type) ((LdcInsnNode) insn).cst).getInternalName()
                                    .equals("io/netty/channel/socket/nio/NioSocketChannel")) {
                        InsnList call = new InsnList();
                        call.add(new VarInsnNode(Opcodes.ALOAD, 0));
                        call.add(new VarInsnNode(Opcodes.ILOAD, 1));
                        call.add(new MethodInsnNode(Opcodes.INVOKESTATIC, HOOKS, "channelClass",
                                "(Ljava/net/InetAddress;I)Ljava/lang/Class;", false));
                        AbstractInsnNode next = insn.getNext();
                        m.instructions.insertBefore(insn, call);
                        m.instructions.remove(insn);
                        insn = next.getPrevious();
                        sites++;
                    }
                }
                return sites;
            case REWRITE_ADDRESS: {
                InsnList head = new InsnList();
                head.add(new VarInsnNode(Opcodes.ALOAD, 0));
                head.add(new MethodInsnNode(Opcodes.INVOKESTATIC, HOOKS, "rewriteServerAddress",
                        "(Ljava/lang/String;)Ljava/lang/String;", false));
                head.add(new VarInsnNode(Opcodes.ASTORE, 0));
                m.instructions.insert(head);
                return 1;
            }
            case RESOLVE:
                for (AbstractInsnNode insn = m.instructions.getFirst(); insn != null; insn = insn.getNext()) {
                    if (insn.getOpcode() == Opcodes.INVOKESTATIC) {
                        MethodInsnNode call = (MethodInsnNode) insn;
                        if (call.owner.equals("java/net/InetAddress") && call.name.equals("getByName")
                                && call.desc.equals("(Ljava/lang/String;)Ljava/net/InetAddress;")) {
                            call.owner = HOOKS;
                            call.name = "resolve";
                            sites++;
                        }
                    }
                }
                return sites;
            default:
                return 0;
        }
    }

    private static boolean contains(String[] names, String name) {
        for (String n : names) {
            if (n.equals(name)) {
                return true;
            }
        }
        return false;
    }
}
