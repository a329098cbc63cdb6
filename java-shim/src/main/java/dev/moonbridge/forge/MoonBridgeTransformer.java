package dev.moonbridge.forge;

import java.util.ArrayList;
import java.util.List;
import net.minecraft.launchwrapper.IClassTransformer;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;
import org.objectweb.asm.tree.AbstractInsnNode;
import org.objectweb.asm.tree.ClassNode;
import org.objectweb.asm.tree.FieldNode;
import org.objectweb.asm.tree.InsnList;
import org.objectweb.asm.tree.LdcInsnNode;
import org.objectweb.asm.tree.MethodInsnNode;
import org.objectweb.asm.tree.MethodNode;
import org.objectweb.asm.tree.TypeInsnNode;
import org.objectweb.asm.tree.VarInsnNode;

/**
 * The coremod's class transformer (ASM 5 API, as Forge 1.7.10 ships). It runs after FML's deobfuscation
 * ({@code SortingIndex(1001)}), so class names are MCP names and members SRG names ({@code func_...}); the MCP
 * names of a development workspace are accepted too. Targets (see docs/java-shim.md for sources):
 *
 * <ul>
 *   <li>{@code net.minecraft.network.NetworkManager.func_150726_a(InetAddress, int)} (provideLanClient): the
 *       {@code NioSocketChannel.class} constant becomes {@link MoonBridgeHooks#channelClass}, and the class gets
 *       the static field {@link MoonBridgeHooks#CHANNEL_PATCH_MARKER}. When the method already holds a Mixin
 *       callback (another mod injected there first, possibly cancelling it at its head), it is left alone.</li>
 *   <li>{@code net.minecraft.client.multiplayer.ServerAddress.func_78860_a(String)}: the argument first goes
 *       through {@link MoonBridgeHooks#rewriteServerAddress}, and the SRV lookup {@code func_78863_b} becomes
 *       {@link MoonBridgeHooks#srvLookup}.</li>
 *   <li>{@code net.minecraft.client.multiplayer.GuiConnecting$1.run()} and
 *       {@code net.minecraft.client.network.OldServerPinger.func_147224_a(ServerData)}: {@code
 *       InetAddress.getByName} becomes {@link MoonBridgeHooks#resolve} (given the {@code NetworkManager}
 *       class).</li>
 *   <li>{@code net.minecraft.client.network.OldServerPinger.func_147225_b(ServerData)} (the 1.6 ping):
 *       {@code Bootstrap.connect(String, int)} becomes {@link MoonBridgeHooks#legacyPingConnect}.</li>
 * </ul>
 *
 * A class whose targets are not found is logged and returned unchanged; an exception while patching also
 * leaves the class unchanged. The game is never broken by this transformer.
 */
public class MoonBridgeTransformer implements IClassTransformer {
    static final String HOOKS = "dev/moonbridge/forge/MoonBridgeHooks";

    static final String NETWORK_MANAGER = "net.minecraft.network.NetworkManager";
    static final String SERVER_ADDRESS = "net.minecraft.client.multiplayer.ServerAddress";
    static final String GUI_CONNECTING_THREAD = "net.minecraft.client.multiplayer.GuiConnecting$1";
    static final String OLD_SERVER_PINGER = "net.minecraft.client.network.OldServerPinger";

    private static final String NETWORK_MANAGER_INTERNAL = "net/minecraft/network/NetworkManager";
    private static final String MIXIN_CALLBACKS = "org/spongepowered/asm/mixin/injection/callback/";

    /** One method to patch: its names (SRG first, then MCP), descriptor and change. */
    static final class Target {
        final String[] names;
        final String desc;
        final Patch patch;

        Target(String[] names, String desc, Patch patch) {
            this.names = names;
            this.desc = desc;
            this.patch = patch;
        }
    }

    enum Patch {
        CHANNEL_CLASS,
        REWRITE_ADDRESS,
        RESOLVE,
        LEGACY_PING
    }

    /** The targets in {@code className} (runtime name), or none. */
    static List<Target> targets(String className) {
        List<Target> t = new ArrayList<Target>();
        if (className.equals(NETWORK_MANAGER)) {
            t.add(new Target(new String[] {"func_150726_a", "provideLanClient"},
                    "(Ljava/net/InetAddress;I)Lnet/minecraft/network/NetworkManager;", Patch.CHANNEL_CLASS));
        } else if (className.equals(SERVER_ADDRESS)) {
            t.add(new Target(new String[] {"func_78860_a"},
                    "(Ljava/lang/String;)Lnet/minecraft/client/multiplayer/ServerAddress;", Patch.REWRITE_ADDRESS));
        } else if (className.equals(GUI_CONNECTING_THREAD)) {
            t.add(new Target(new String[] {"run"}, "()V", Patch.RESOLVE));
        } else if (className.equals(OLD_SERVER_PINGER)) {
            t.add(new Target(new String[] {"func_147224_a", "ping"}, "(Lnet/minecraft/client/multiplayer/ServerData;)V",
                    Patch.RESOLVE));
            t.add(new Target(new String[] {"func_147225_b", "tryCompatibilityPing"},
                    "(Lnet/minecraft/client/multiplayer/ServerData;)V", Patch.LEGACY_PING));
        }
        return t;
    }

    @Override
    public byte[] transform(String name, String transformedName, byte[] basicClass) {
        if (basicClass == null || transformedName == null) {
            return basicClass;
        }
        List<Target> targets = targets(transformedName);
        if (targets.isEmpty()) {
            return basicClass;
        }
        try {
            return patch(basicClass, transformedName, targets);
        } catch (Throwable t) {
            MoonBridgeHooks.LOG.error("MoonBridge: patching " + transformedName + " failed; leaving it unchanged", t);
            return basicClass;
        }
    }

    static byte[] patch(byte[] bytes, String className, List<Target> targets) {
        ClassNode node = new ClassNode();
        new ClassReader(bytes).accept(node, 0);
        int patched = 0;
        for (Target target : targets) {
            int sites = 0;
            for (MethodNode m : node.methods) {
                if (target.desc.equals(m.desc) && contains(target.names, m.name)) {
                    sites += apply(node, m, target.patch);
                }
            }
            if (sites == 0) {
                MoonBridgeHooks.LOG.warn("MoonBridge: no {} target found in {} ({}{}); that part stays vanilla", target.patch,
                        className, target.names[0], target.desc);
            } else {
                MoonBridgeHooks.LOG.info("MoonBridge: patched {}.{} ({} site(s), {})", className, target.names[0], sites,
                        target.patch);
            }
            patched += sites;
        }
        if (patched == 0) {
            return bytes;
        }
        ClassWriter w = new ClassWriter(ClassWriter.COMPUTE_MAXS);
        node.accept(w);
        return w.toByteArray();
    }

    /** True when {@code m} calls into Mixin's callback types: a mod injected code there before this transformer. */
    static boolean hasMixinCallback(MethodNode m) {
        for (AbstractInsnNode insn = m.instructions.getFirst(); insn != null; insn = insn.getNext()) {
            if (insn instanceof TypeInsnNode && ((TypeInsnNode) insn).desc.startsWith(MIXIN_CALLBACKS)
                    || insn instanceof MethodInsnNode && ((MethodInsnNode) insn).owner.startsWith(MIXIN_CALLBACKS)) {
                return true;
            }
        }
        return false;
    }

    private static int apply(ClassNode owner, MethodNode m, Patch patch) {
        switch (patch) {
            case CHANNEL_CLASS:
                return channelClass(owner, m);
            case REWRITE_ADDRESS:
                return rewriteAddress(owner, m);
            case RESOLVE:
                return replaceCalls(m, Opcodes.INVOKESTATIC, "java/net/InetAddress", "getByName",
                        "(Ljava/lang/String;)Ljava/net/InetAddress;", new Replacement() {
                            @Override
                            public void emit(InsnList before, MethodInsnNode call) {
                                // The NetworkManager class as an argument: resolve() checks its patch marker, and
                                // the constant loads (and so patches) it before any placeholder is handed out.
                                before.add(new LdcInsnNode(Type.getObjectType(NETWORK_MANAGER_INTERNAL)));
                                call.desc = "(Ljava/lang/String;Ljava/lang/Class;)Ljava/net/InetAddress;";
                                retarget(call, "resolve");
                            }
                        });
            case LEGACY_PING:
                return replaceCalls(m, Opcodes.INVOKEVIRTUAL, "io/netty/bootstrap/Bootstrap", "connect",
                        "(Ljava/lang/String;I)Lio/netty/channel/ChannelFuture;", new Replacement() {
                            @Override
                            public void emit(InsnList before, MethodInsnNode call) {
                                call.desc = "(Lio/netty/bootstrap/Bootstrap;Ljava/lang/String;I)Lio/netty/channel/ChannelFuture;";
                                retarget(call, "legacyPingConnect");
                            }
                        });
            default:
                return 0;
        }
    }

    private static int channelClass(ClassNode owner, MethodNode m) {
        if (hasMixinCallback(m)) {
            MoonBridgeHooks.LOG.warn("MoonBridge: {}.{} already holds a Mixin injection from another mod; it is left alone "
                    + "and MoonBridge routes stay off (vanilla servers keep working)", owner.name, m.name);
            return 0;
        }
        int sites = 0;
        for (AbstractInsnNode insn = m.instructions.getFirst(); insn != null; insn = insn.getNext()) {
            if (insn instanceof LdcInsnNode && ((LdcInsnNode) insn).cst instanceof Type
                    && ((Type) ((LdcInsnNode) insn).cst).getInternalName().equals("io/netty/channel/socket/nio/NioSocketChannel")) {
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
        if (sites > 0) {
            boolean marked = false;
            for (FieldNode f : owner.fields) {
                marked |= f.name.equals(MoonBridgeHooks.CHANNEL_PATCH_MARKER);
            }
            if (!marked) {
                owner.fields.add(new FieldNode(Opcodes.ACC_PUBLIC | Opcodes.ACC_STATIC | Opcodes.ACC_FINAL | Opcodes.ACC_SYNTHETIC,
                        MoonBridgeHooks.CHANNEL_PATCH_MARKER, "Z", null, Integer.valueOf(1)));
            }
        }
        return sites;
    }

    private static int rewriteAddress(ClassNode owner, MethodNode m) {
        InsnList head = new InsnList();
        head.add(new VarInsnNode(Opcodes.ALOAD, 0));
        head.add(new MethodInsnNode(Opcodes.INVOKESTATIC, HOOKS, "rewriteServerAddress",
                "(Ljava/lang/String;)Ljava/lang/String;", false));
        head.add(new VarInsnNode(Opcodes.ASTORE, 0));
        m.instructions.insert(head);
        final String ownerName = owner.name;
        // The SRV lookup: this class's own static String -> String[] method (func_78863_b).
        int srv = replaceCalls(m, Opcodes.INVOKESTATIC, ownerName, null, "(Ljava/lang/String;)[Ljava/lang/String;",
                new Replacement() {
                    @Override
                    public void emit(InsnList before, MethodInsnNode call) {
                        before.add(new LdcInsnNode(Type.getObjectType(ownerName)));
                        before.add(new LdcInsnNode(call.name));
                        call.desc = "(Ljava/lang/String;Ljava/lang/Class;Ljava/lang/String;)[Ljava/lang/String;";
                        retarget(call, "srvLookup");
                    }
                });
        if (srv == 0) {
            MoonBridgeHooks.LOG.warn("MoonBridge: no SRV lookup found in {}.{}; SRV records are looked up for routed hosts too",
                    ownerName, m.name);
        }
        return 1 + srv;
    }

    /** Rewrites a matched call in place (and may add instructions before it). */
    interface Replacement {
        void emit(InsnList before, MethodInsnNode call);
    }

    private static void retarget(MethodInsnNode call, String hook) {
        call.setOpcode(Opcodes.INVOKESTATIC);
        call.owner = HOOKS;
        call.name = hook;
        call.itf = false;
    }

    /** Replaces every call matching opcode, owner (null: any), name (null: any) and descriptor; returns how many. */
    private static int replaceCalls(MethodNode m, int opcode, String owner, String name, String desc, Replacement r) {
        List<MethodInsnNode> found = new ArrayList<MethodInsnNode>();
        for (AbstractInsnNode insn = m.instructions.getFirst(); insn != null; insn = insn.getNext()) {
            if (insn.getOpcode() == opcode) {
                MethodInsnNode call = (MethodInsnNode) insn;
                if ((owner == null || call.owner.equals(owner)) && (name == null || call.name.equals(name))
                        && call.desc.equals(desc) && !call.owner.equals(HOOKS)) {
                    found.add(call);
                }
            }
        }
        for (MethodInsnNode call : found) {
            InsnList before = new InsnList();
            r.emit(before, call);
            if (before.size() > 0) {
                m.instructions.insertBefore(call, before);
            }
        }
        return found.size();
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
