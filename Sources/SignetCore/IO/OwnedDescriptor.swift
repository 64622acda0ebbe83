#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import SystemPackage

/// A descriptor Signet opened and must close: its one owner.
///
/// It closes the descriptor exactly once: when the scope that holds it ends (a noncopyable
/// local lives to the end of its scope unless consumed), when the class that stores it is
/// deinitialised, or earlier with ``close()``. ``take()`` hands the descriptor on without
/// closing it (to an owner of another kind, such as a `FILE *` or libzip). Code that only uses
/// a descriptor is passed the `FileDescriptor` (``descriptor``), which closes nothing; raw
/// `Int32`s appear only at the C calls themselves (libzip, OpenSSL, libcurl, the `*at` calls).
package struct OwnedDescriptor: ~Copyable {
    /// The descriptor, to use (never to close) while this owner lives.
    package let descriptor: FileDescriptor

    /// Takes ownership of `descriptor`.
    init(_ descriptor: FileDescriptor) { self.descriptor = descriptor }

    /// Takes ownership of a raw descriptor a C call just returned (it must be valid: check the
    /// call's result first).
    package init(adopting raw: Int32) { self.descriptor = FileDescriptor(rawValue: raw) }

    deinit { _ = Glibc.close(descriptor.rawValue) }

    /// Closes the descriptor now, reporting a failure (a deferred write error, on a file that
    /// was written). It is closed whatever the result: Linux releases it even when close fails.
    package consuming func close() throws(SystemCallFailure) {
        let raw = descriptor.rawValue
        discard self
        if Glibc.close(raw) != 0 && errno != EINTR { throw SystemCallFailure("close", code: errno) }
    }

    /// Hands the descriptor on without closing it: whoever takes it closes it.
    package consuming func take() -> FileDescriptor {
        let descriptor = self.descriptor
        discard self
        return descriptor
    }
}

/// An ``OwnedDescriptor`` held by reference, for what cannot hold a noncopyable value
/// (dictionaries, arrays, escaping closures): the descriptor closes when the last reference
/// goes. Immutable, so it may be shared between threads.
package final class SharedDescriptor: Sendable {
    private let owned: OwnedDescriptor

    /// The descriptor, while this lives.
    package var descriptor: FileDescriptor { owned.descriptor }

    package init(_ owned: consuming OwnedDescriptor) { self.owned = owned }
}
