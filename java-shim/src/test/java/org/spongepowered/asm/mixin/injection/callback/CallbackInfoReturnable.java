package org.spongepowered.asm.mixin.injection.callback;

/**
 * Test stub of Mixin's {@code CallbackInfoReturnable}, the object a Mixin injection creates at the head of a
 * method it may cancel. Only its name matters to the tests: {@code MoonBridgeTransformer} recognises a method
 * another mod already injected into by this type.
 */
public class CallbackInfoReturnable<R> {
    private final String name;
    private boolean cancelled;
    private R value;

    public CallbackInfoReturnable(String name, boolean cancellable) {
        this.name = name;
    }

    public String getId() {
        return name;
    }

    public boolean isCancelled() {
        return cancelled;
    }

    public void setReturnValue(R value) {
        this.value = value;
        this.cancelled = true;
    }

    public R getReturnValue() {
        return value;
    }
}
